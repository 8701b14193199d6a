// relpos::Model: wraps model::Transformer and the checkpoint reader/writer.
#include "relpos/lab/model.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <iterator>
#include <optional>
#include <thread>

#include "lab/api/internal.h"
#include "base/check.h"
#include "base/rng.h"
#include "model/arch.h"
#include "model/beam_search.h"
#include "model/quantized_linears.h"
#include "train/checkpoint.h"
#include "train/data_source.h"
#include "base/threads.h"
#include "model/memory_plan.h"

namespace relpos {
namespace {

// The batch with the public API's empty defaults filled in (the model takes
// every sequence's targets and lengths).
model::Batch ToBatch(const TokenBatch& b) {
  model::Batch out = b;
  if (out.targets.empty()) out.targets.assign(b.tokens.size(), -1);
  if (out.lengths.empty()) {
    out.lengths.assign(static_cast<size_t>(std::max<int64_t>(b.batch, 0)),
                       b.length);
  }
  if (out.source_lengths.empty() && !out.source_tokens.empty()) {
    out.source_lengths.assign(
        static_cast<size_t>(std::max<int64_t>(b.batch, 0)), b.source_length);
  }
  return out;
}

// Runs work(i) for i in [0, n) on min(threads, n) threads, each taking the
// next index in turn and running one OpenMP thread (the small per-step
// products of a search need no team); the first exception is rethrown.
template <typename Work>
void OnWorkers(int64_t n, int threads, const Work& work) {
  const int64_t workers = std::min<int64_t>(threads, n);
  std::atomic<int64_t> next{0};
  std::vector<std::exception_ptr> failed(static_cast<size_t>(workers));
  std::vector<std::thread> pool;
  for (int64_t w = 0; w < workers; ++w) {
    pool.emplace_back([&, w] {
      try {
        base::SetThreads(1);
        for (int64_t i; (i = next++) < n;) work(i);
      } catch (...) {
        failed[static_cast<size_t>(w)] = std::current_exception();
        next = n;  // the others stop after their current item
      }
    });
  }
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : failed) {
    if (e) std::rethrow_exception(e);
  }
}

// model::Translate of `sources` on `threads` threads, in batches
// (DecodeOptions::max_batch_size): with more sentences than max_batch_size
// > 0, they are sorted by source length and cut into batches of that many,
// as CTranslate2's translate_batch does, and the threads take the batches
// in turn (longest first), as its inter_threads do. One batch on several threads is cut into
// min(threads, sentences) contiguous shares of about equal source tokens,
// one per thread; one thread searches a batch with every thread inside its
// matrix products. A sentence's search does not depend on the others in
// its batch, so the output is the same either way (in the input's order).
std::vector<model::Hypothesis> TranslateBatches(
    const model::Transformer& t,
    const std::vector<std::vector<int32_t>>& sources,
    const model::BeamSearchOptions& o, int threads, int64_t max_batch_size) {
  const int64_t n = static_cast<int64_t>(sources.size());
  std::vector<std::vector<int64_t>> batches;  // indices into sources
  if (max_batch_size > 0 && n > max_batch_size) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return sources[static_cast<size_t>(a)].size() <
             sources[static_cast<size_t>(b)].size();
    });
    for (int64_t b = 0; b < n; b += max_batch_size) {
      batches.emplace_back(order.begin() + b,
                           order.begin() + std::min(n, b + max_batch_size));
    }
  } else if (threads > 1 && n > 1) {
    // Share k ends where the running token count passes (k + 1) / shares
    // of the total, keeping at least one sentence per share.
    const int64_t shares = std::min<int64_t>(threads, n);
    int64_t tokens = 0;
    for (const auto& s : sources) tokens += static_cast<int64_t>(s.size()) + 1;
    int64_t seen = 0, i = 0;
    for (int64_t k = 0; k < shares; ++k) {
      const int64_t goal = tokens * (k + 1) / shares;
      const int64_t last = n - (shares - 1 - k);  // room for the later shares
      batches.emplace_back();
      do {
        seen += static_cast<int64_t>(sources[static_cast<size_t>(i)].size()) + 1;
        batches.back().push_back(i++);
      } while (i < last && seen < goal);
    }
  } else {
    base::SetThreads(threads);
    return model::Translate(t, sources, o);
  }
  std::vector<model::Hypothesis> best(static_cast<size_t>(n));
  auto search = [&](int64_t b) {
    const std::vector<int64_t>& batch = batches[static_cast<size_t>(b)];
    std::vector<std::vector<int32_t>> part;
    for (int64_t i : batch) part.push_back(sources[static_cast<size_t>(i)]);
    std::vector<model::Hypothesis> found = model::Translate(t, part, o);
    for (size_t k = 0; k < batch.size(); ++k) {
      best[static_cast<size_t>(batch[k])] = std::move(found[k]);
    }
  };
  if (threads > 1) {
    // Longest batches first (they come sorted shortest first): the last
    // batches taken are short, so the threads finish together.
    const int64_t count = static_cast<int64_t>(batches.size());
    OnWorkers(count, threads, [&](int64_t b) { search(count - 1 - b); });
  } else {
    base::SetThreads(1);
    for (size_t b = 0; b < batches.size(); ++b) search(static_cast<int64_t>(b));
  }
  return best;
}

const model::Parameter& Find(const model::Transformer& t,
                             const std::string& name) {
  const int64_t i = t.FindParameter(name);
  RELPOS_CHECK_ARG(i >= 0, "the model has no parameter '" << name << "'");
  return t.parameters()[static_cast<size_t>(i)];
}

}  // namespace

Model BorrowModel(train::Trainer& trainer) {
  auto impl = std::make_unique<ApiAccess::ModelImpl>();
  impl->config = MakeConfig(trainer.model_config(), trainer.config());
  impl->transformer = std::shared_ptr<model::Transformer>(
      &trainer.model(), [](model::Transformer*) {});
  impl->state = &trainer.state();
  impl->signal = &trainer.signal();
  return ApiAccess::Make(std::move(impl));
}

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Model::Model(const ExperimentConfig& config)
    : impl_(std::make_unique<Impl>()) {
  impl_->config = config;
  impl_->config.Resolve();
  model::CheckMemory(model::PlanModel(Internals(impl_->config).model));
  impl_->transformer =
      std::make_shared<model::Transformer>(Internals(impl_->config).model);
}

Model Model::Load(const std::string& dir, const std::string& compute_type) {
  const model::ComputeType type =
      model::ParseComputeType(compute_type, "compute_type");
  train::TrainConfig tc;
  train::TrainState state;
  train::LoadedModel loaded = train::LoadModelFor(dir, type, &tc, &state);
  auto impl = std::make_unique<Impl>();
  impl->config = MakeConfig(loaded.model->config(), tc);
  impl->step = state.step;
  impl->transformer = std::move(loaded.model);
  if (loaded.quantized != nullptr) {
    impl->quantized = std::move(loaded.quantized);
    impl->compute_type = compute_type;
  }
  return Model(std::move(impl));
}

Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

void Model::Save(const std::string& dir) const {
  const model::Transformer& t = FloatTransformer(*this, "Save");
  train::Checkpoint ck;
  ck.model_config = t.config();
  ck.train_config = Internals(impl_->config).train;
  ck.state.step = step();
  ck.parameters = train::GetParameters(t);
  // Fresh AdamW moments: a resumed run starts its optimiser from zero.
  for (const char* prefix : {"exp_avg.", "exp_avg_sq."}) {
    for (const model::Parameter& p : t.parameters()) {
      ck.optimizer.push_back(
          {prefix + p.name, p.shape, std::vector<float>(p.value.size(), 0.f)});
    }
  }
  if (impl_->signal) ck.signal = *impl_->signal;
  train::WriteCheckpoint(dir, ck);
}

const ExperimentConfig& Model::config() const { return impl_->config; }

int64_t Model::step() const {
  return impl_->state ? impl_->state->step : impl_->step;
}

int64_t Model::NumParameters() const {
  return impl_->transformer->NumParameters();
}

std::vector<std::string> Model::ParameterNames() const {
  std::vector<std::string> names;
  for (const model::Parameter& p : impl_->transformer->parameters()) {
    names.push_back(p.name);
  }
  return names;
}

ConstView<float> Model::Parameter(const std::string& name) const {
  const model::Parameter& p = Find(FloatTransformer(*this, "Parameter"), name);
  return ViewOf(p.value.data(), p.shape);
}

void Model::SetParameter(const std::string& name,
                         std::span<const float> values) {
  model::Transformer& t = FloatTransformer(*this, "SetParameter");
  const int64_t i = t.FindParameter(name);
  RELPOS_CHECK_ARG(i >= 0, "the model has no parameter '" << name << "'");
  std::vector<float>& v = t.parameters()[static_cast<size_t>(i)].value;
  RELPOS_CHECK_ARG(values.size() == v.size(),
                   "parameter '" << name << "' has " << v.size()
                                 << " values; got " << values.size());
  std::copy(values.begin(), values.end(), v.begin());
}

ConstView<float> Model::Gradient(const std::string& name) const {
  // Zeros before the first ForwardBackward (the model allocates its
  // gradients lazily).
  model::Transformer& t = FloatTransformer(*this, "Gradient");
  t.AllocateGradients();
  const model::Parameter& p = Find(t, name);
  return ViewOf(p.grad.data(), p.shape);
}

ForwardResult Model::Forward(const TokenBatch& batch) {
  ForwardResult r;
  r.loss = FloatTransformer(*this, "Forward")
               .Evaluate(ToBatch(batch), &r, &r.predictions);
  return r;
}

ModelOutputs Model::Outputs(const TokenBatch& batch) {
  model::Transformer& t = FloatTransformer(*this, "Outputs");
  model::Batch b = ToBatch(batch);
  // Only the outputs are wanted: no target takes part in the loss.
  b.targets.assign(b.tokens.size(), -1);
  t.Forward(b, model::ForwardMode::kInference, nullptr);
  ModelOutputs out;
  out.batch = b.batch;
  out.length = b.length;
  out.d_model = t.config().d_model;
  out.vocab_size = t.config().vocab_size;
  const int64_t rows_padded = b.batch * b.length;
  out.hidden.assign(static_cast<size_t>(rows_padded * out.d_model), 0.f);
  out.logits.assign(static_cast<size_t>(rows_padded * out.vocab_size), 0.f);
  // Unpack: the model's rows are the valid positions, sequence after
  // sequence.
  const float* hidden = t.LastHidden().data();
  const float* logits = t.LastLogits().data();
  int64_t row = 0;
  for (int64_t s = 0; s < b.batch; ++s) {
    for (int64_t i = 0; i < b.lengths[s]; ++i, ++row) {
      const int64_t at = s * b.length + i;
      std::copy_n(hidden + row * out.d_model, out.d_model,
                  out.hidden.begin() + at * out.d_model);
      std::copy_n(logits + row * out.vocab_size, out.vocab_size,
                  out.logits.begin() + at * out.vocab_size);
    }
  }
  return out;
}

double Model::ForwardBackward(const TokenBatch& batch, uint64_t dropout_seed) {
  Rng rng(dropout_seed);
  return FloatTransformer(*this, "ForwardBackward")
      .ForwardBackward(ToBatch(batch), rng, nullptr);
}

std::vector<Translation> Model::Translate(
    const std::vector<std::vector<int32_t>>& sources,
    const DecodeOptions& options) {
  model::BeamSearchOptions o;
  o.beam_size = options.beam_size;
  if (options.length_penalty == "wu") {
    o.length_penalty = model::LengthPenalty::kWu;
  } else if (options.length_penalty == "power") {
    o.length_penalty = model::LengthPenalty::kPower;
  } else {
    RELPOS_CHECK_ARG(options.length_penalty == "none",
                     "length penalty must be wu, power or none (got '"
                         << options.length_penalty << "')");
    o.length_penalty = model::LengthPenalty::kNone;
  }
  o.alpha = options.alpha;
  o.max_length_ratio = options.max_length_ratio;
  o.max_length = options.max_length;
  o.bos = options.bos;
  o.eos = options.eos;
  const model::Transformer& t = *impl_->transformer;
  RELPOS_CHECK_ARG(model::Describe(t.config().arch).source,
                   "translation needs a seq2seq model; this model's arch is "
                       << model::ToString(t.config().arch));
  if (o.bos < 0 || o.eos < 0) {
    const auto [bos, eos] = BosEos();
    if (o.bos < 0) o.bos = bos;
    if (o.eos < 0) o.eos = eos;
  }
  // Options first (MaxDecodingSteps needs valid ones); then the caches
  // the search allocates must fit beside the model.
  model::Validate(o, t.config().vocab_size);
  RELPOS_CHECK_ARG(options.threads >= 0 && options.threads <= 1024,
                   "threads must be in [0, 1024] (got " << options.threads
                                                        << ")");
  const int threads = options.threads > 0 ? options.threads
                                          : Internals(impl_->config).train.threads;
  int64_t longest = 0;
  for (const std::vector<int32_t>& s : sources) {
    longest = std::max<int64_t>(longest, static_cast<int64_t>(s.size()));
  }
  RELPOS_CHECK_ARG(options.max_batch_size >= 0,
                   "max batch size must be >= 0 (got "
                       << options.max_batch_size << ")");
  // The sentences searched at once: every one, or a batch per thread.
  int64_t at_once = static_cast<int64_t>(sources.size());
  if (options.max_batch_size > 0 && options.max_batch_size < at_once) {
    // max_batch_size < sentences and threads <= 1024: no overflow.
    at_once = std::min<int64_t>(
        at_once, options.max_batch_size * static_cast<int64_t>(threads));
  }
  model::MemoryPlan plan = model::PlanTranslation(
      t.config(), at_once, longest, o.beam_size,
      model::MaxDecodingSteps(longest, o), threads);
  plan.resident = model::PlanModel(t.config()).total();
  model::CheckMemory(plan);
  std::optional<model::QuantizedLinears> made;
  o.quantized = QuantizedFor(*this, options.compute_type, &made);
  std::vector<model::Hypothesis> best =
      TranslateBatches(t, sources, o, threads, options.max_batch_size);
  std::vector<Translation> out;
  for (model::Hypothesis& h : best) {
    out.push_back({std::move(h.tokens), h.log_prob, h.score, h.ended_by_eos});
  }
  return out;
}

void Model::Quantize(const std::string& compute_type) {
  const model::ComputeType type =
      model::ParseComputeType(compute_type, "compute_type");
  RELPOS_CHECK_ARG(type != model::ComputeType::kFloat32,
                   "Quantize: compute_type must be int8 or int8_a8 (float32 "
                   "is the model as loaded)");
  RELPOS_CHECK_ARG(impl_->quantized == nullptr,
                   "Quantize: the model is already quantized ("
                       << impl_->compute_type << ")");
  RELPOS_CHECK_ARG(impl_->state == nullptr,
                   "Quantize: this model is a Training's; quantize a loaded "
                   "one (Model::Load)");
  model::Transformer& t = *impl_->transformer;
  auto q = std::make_shared<model::QuantizedLinears>(t, type);
  q->DropFloatWeights(&t);
  impl_->quantized = std::move(q);
  impl_->compute_type = compute_type;
}

const std::string& Model::compute_type() const { return impl_->compute_type; }

model::Transformer& FloatTransformer(const Model& model, const char* what) {
  const auto& m = Internals(model);
  RELPOS_CHECK_ARG(m.quantized == nullptr,
                   what << ": this model keeps its linear layers in "
                        << m.compute_type
                        << " only (Model::Quantize freed their float32 "
                           "weights); load it again for float32 use");
  return *m.transformer;
}

const model::QuantizedLinears* QuantizedFor(
    const Model& model, const std::string& compute_type,
    std::optional<model::QuantizedLinears>* made) {
  const model::ComputeType type =
      model::ParseComputeType(compute_type, "compute_type");
  const auto& m = Internals(model);
  if (m.quantized != nullptr) {
    RELPOS_CHECK_ARG(compute_type == m.compute_type,
                     "compute_type must be " << m.compute_type
                                             << ", the type this model was "
                                                "quantized to (got "
                                             << compute_type << ")");
    return m.quantized.get();
  }
  if (type == model::ComputeType::kFloat32) return nullptr;
  made->emplace(*m.transformer, type);
  return &**made;
}

std::pair<int32_t, int32_t> Model::BosEos() const {
  RELPOS_CHECK_ARG(model::Describe(impl_->transformer->config().arch).source,
                   "BOS / EOS: this model's arch is "
                       << model::ToString(impl_->transformer->config().arch)
                       << ", not seq2seq");
  const auto data = train::MakeDataSource(Internals(impl_->config).train.data);
  RELPOS_CHECK_ARG(data->pairs() != nullptr,
                   "the model's data has no BOS / EOS; give them");
  return {data->pairs()->tokens().bos, data->pairs()->tokens().eos};
}

bool HasCheckpoint(const std::string& dir) { return train::HasCheckpoint(dir); }

const std::vector<std::string>& ComputeTypeNames() {
  static const std::vector<std::string> names(
      std::begin(model::kComputeTypeNames), std::end(model::kComputeTypeNames));
  return names;
}

}  // namespace relpos
