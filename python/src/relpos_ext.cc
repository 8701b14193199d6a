// relpos._relpos_ext: the thin nanobind layer between Python and the public
// C++ API (include/relpos/). Users never call it directly: python/relpos/
// __init__.py validates and converts every argument (dtype, contiguity,
// optional tables, per-head inference, names in error messages), allocates
// the outputs with numpy and passes them in here to be filled. This file only
//   - turns C-contiguous CPU arrays into relpos::TensorView,
//   - releases the GIL while relpos computes,
//   - maps relpos's exceptions to Python ones (InvalidArgument -> ValueError).
//
// Functions are bound once per scalar type with a suffix (forward_f32,
// forward_f64, ...) rather than as overloads, so a dtype slip in the Python
// layer fails loudly instead of silently picking the other overload.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "relpos/relpos.h"
#include "model_ext.h"
#include "position_schemes_ext.h"
#include "schemes_ext.h"
#include "inspect_ext.h"
#include "translate_ext.h"
#include "experiment_ext.h"
#include "array_view.h"

namespace nb = nanobind;

namespace relpos {
namespace {

template <typename T>
ConstView<T> ToOptionalView(const std::optional<InArray<T>>& a,
                            const char* name) {
  return a ? ToView<const T>(*a, name) : ConstView<T>();
}

// The options struct, from the keyword arguments the Python layer resolved.
// float32 takes kAuto (the fused kernel once it is built, the reference
// until then); float64 always takes the reference, which is what the
// float64 gradient checks are meant to exercise.
// The scheme of docs/math.md section 8, as relpos/__init__.py resolved it:
// bucket map "symmetric" (max_distance), "clip" (clip_left, clip_right) or
// "t5" (t5_num_buckets, t5_max_distance, t5_bidirectional); score term
// "vector" (ak), "scalar_table" (bias) or "alibi" (alibi_slopes, empty =
// the paper's rule). Anything else is an InvalidArgument.
struct SchemeArgs {
  std::string buckets = "symmetric";
  int64_t clip_left = 0, clip_right = 0;
  int64_t t5_num_buckets = 32, t5_max_distance = 128;
  bool t5_bidirectional = true;
  std::string score = "vector";
  std::vector<double> alibi_slopes;
};

void ApplyScheme(const SchemeArgs& s, bool have_ak, bool have_bias,
                 bool have_pb, AttentionOptions& o) {
  if (s.buckets == "clip") {
    o.buckets.kind = BucketKind::kClip;
    o.buckets.clip = {s.clip_left, s.clip_right};
  } else if (s.buckets == "t5") {
    o.buckets.kind = BucketKind::kT5;
    o.buckets.t5 = {s.t5_num_buckets, s.t5_max_distance, s.t5_bidirectional};
  } else if (s.buckets != "symmetric") {
    throw InvalidArgument("relpos: buckets must be 'symmetric', 'clip' or "
                          "'t5' (got '" + s.buckets + "')");
  }
  if (s.score == "vector") {
    o.key_term = have_ak;
  } else if (s.score == "scalar_table") {
    o.score_term = ScoreTerm::kScalarTable;
    o.key_term = have_bias;
  } else if (s.score == "alibi") {
    o.score_term = ScoreTerm::kAlibi;
    o.key_term = true;
    o.alibi_slopes = s.alibi_slopes;
  } else {
    throw InvalidArgument("relpos: score must be 'vector', 'scalar_table' or "
                          "'alibi' (got '" + s.score + "')");
  }
  o.position_query_bias = have_pb;
}

// The per-row layout options and the score scale, as relpos/__init__.py
// resolved them: per-row query offsets (empty: query_offset for every row),
// left-padding key starts (empty: keys start at 0), and the multiplier of
// the scaled score terms (None: 1 / sqrt(dk)).
struct RowArgs {
  std::vector<int64_t> query_offsets;
  std::vector<int64_t> key_starts;
  std::optional<double> scale;
};

template <typename T>
AttentionOptions MakeOptions(int64_t max_distance, bool per_head_tables,
                             bool key_term, bool value_term, bool causal,
                             std::vector<int64_t> key_lengths,
                             std::optional<int64_t> query_offset,
                             const RowArgs& rows) {
  AttentionOptions o;
  o.max_distance = max_distance;
  o.per_head_tables = per_head_tables;
  o.key_term = key_term;
  o.value_term = value_term;
  o.causal = causal;
  o.key_lengths = std::move(key_lengths);
  o.query_offset = query_offset;
  o.query_offsets = rows.query_offsets;
  o.key_starts = rows.key_starts;
  o.scale = rows.scale;
  o.path = std::is_same_v<T, float> ? AttentionPath::kAuto
                                    : AttentionPath::kReference;
  return o;
}

// Views of the seven inputs; each named in its error message.
template <typename T>
AttentionInputs<T> MakeInputs(InArray<T> q, InArray<T> k, InArray<T> v,
                              const std::optional<InArray<T>>& ak,
                              const std::optional<InArray<T>>& av,
                              const std::optional<InArray<T>>& bias,
                              const std::optional<InArray<T>>& pb) {
  return {.q = ToView<const T>(q, "q"),
          .k = ToView<const T>(k, "k"),
          .v = ToView<const T>(v, "v"),
          .ak = ToOptionalView<T>(ak, "ak"),
          .av = ToOptionalView<T>(av, "av"),
          .bias = ToOptionalView<T>(bias, "bias"),
          .pb = ToOptionalView<T>(pb, "pb")};
}

// out [B, H, Nq, dv] and lse [B, H, Nq] are written in place.
template <typename T>
void Forward(InArray<T> q, InArray<T> k, InArray<T> v,
             std::optional<InArray<T>> ak, std::optional<InArray<T>> av,
             OutArray<T> out, OutArray<T> lse, int64_t max_distance,
             bool per_head_tables, bool causal,
             std::vector<int64_t> key_lengths,
             std::optional<int64_t> query_offset,
             std::optional<InArray<T>> bias, std::optional<InArray<T>> pb,
             const SchemeArgs& scheme, const RowArgs& rows) {
  AttentionOptions o = MakeOptions<T>(
      max_distance, per_head_tables, ak.has_value(), av.has_value(), causal,
      std::move(key_lengths), query_offset, rows);
  ApplyScheme(scheme, ak.has_value(), bias.has_value(), pb.has_value(), o);
  const AttentionInputs<T> in = MakeInputs<T>(q, k, v, ak, av, bias, pb);
  const TensorView<T> out_view = ToView<T>(out, "out");
  const TensorView<T> lse_view = ToView<T>(lse, "lse");
  // The arrays stay alive (the caller holds them) and nothing below touches
  // Python objects, so other Python threads may run meanwhile.
  nb::gil_scoped_release release;
  AttentionForward<T>(in, out_view, lse_view, o);
}

// Gradients are written in place; dak / dav / dbias / dpb are None exactly
// when their input is.
template <typename T>
void Backward(InArray<T> q, InArray<T> k, InArray<T> v,
              std::optional<InArray<T>> ak, std::optional<InArray<T>> av,
              InArray<T> out, InArray<T> lse, InArray<T> dout, OutArray<T> dq,
              OutArray<T> dk, OutArray<T> dv, std::optional<OutArray<T>> dak,
              std::optional<OutArray<T>> dav, int64_t max_distance,
              bool per_head_tables, bool causal,
              std::vector<int64_t> key_lengths,
              std::optional<int64_t> query_offset,
              std::optional<InArray<T>> bias, std::optional<InArray<T>> pb,
              std::optional<OutArray<T>> dbias,
              std::optional<OutArray<T>> dpb, const SchemeArgs& scheme,
              const RowArgs& rows) {
  AttentionOptions o = MakeOptions<T>(
      max_distance, per_head_tables, ak.has_value(), av.has_value(), causal,
      std::move(key_lengths), query_offset, rows);
  ApplyScheme(scheme, ak.has_value(), bias.has_value(), pb.has_value(), o);
  const AttentionInputs<T> in = MakeInputs<T>(q, k, v, ak, av, bias, pb);
  const AttentionGrads<T> grads{
      .dq = ToView<T>(dq, "dq"),
      .dk = ToView<T>(dk, "dk"),
      .dv = ToView<T>(dv, "dv"),
      .dak = dak ? ToView<T>(*dak, "dak") : TensorView<T>(),
      .dav = dav ? ToView<T>(*dav, "dav") : TensorView<T>(),
      .dbias = dbias ? ToView<T>(*dbias, "dbias") : TensorView<T>(),
      .dpb = dpb ? ToView<T>(*dpb, "dpb") : TensorView<T>()};
  const ConstView<T> out_view = ToView<const T>(out, "out");
  const ConstView<T> lse_view = ToView<const T>(lse, "lse");
  const ConstView<T> dout_view = ToView<const T>(dout, "dout");
  nb::gil_scoped_release release;
  AttentionBackward<T>(in, out_view, lse_view, dout_view, grads, o);
}

// A view with `shape` and no data (never read): the problem check needs
// the shapes only. None -> an empty view (the argument is absent).
ConstView<float> ShapeView(const std::optional<std::vector<int64_t>>& shape,
                           const char* name) {
  static const float kNoData = 0;
  if (!shape) return {};
  const std::vector<int64_t>& s = *shape;
  switch (s.size()) {
    case 1:
      return ConstView<float>(&kNoData, {s[0]});
    case 2:
      return ConstView<float>(&kNoData, {s[0], s[1]});
    case 3:
      return ConstView<float>(&kNoData, {s[0], s[1], s[2]});
    case 4:
      return ConstView<float>(&kNoData, {s[0], s[1], s[2], s[3]});
    default:
      break;
  }
  throw InvalidArgument(std::string("relpos: ") + name +
                        " must have rank 1 to 4 (got rank " +
                        std::to_string(s.size()) + ")");
}

// The C++ core's checks of one call (relpos::CheckAttention: shapes against
// each other and the options, every range) on the inputs' shapes alone, for
// the Python paths that do not call the core (relpos.triton). Returns the
// resolved problem; InvalidArgument (ValueError) names the argument.
nb::dict CheckProblem(std::vector<int64_t> q, std::vector<int64_t> k,
                      std::vector<int64_t> v,
                      std::optional<std::vector<int64_t>> ak,
                      std::optional<std::vector<int64_t>> av,
                      std::optional<std::vector<int64_t>> bias,
                      std::optional<std::vector<int64_t>> pb,
                      int64_t max_distance, bool per_head_tables, bool causal,
                      std::vector<int64_t> key_lengths,
                      std::optional<int64_t> query_offset,
                      const SchemeArgs& scheme, const RowArgs& rows) {
  AttentionOptions o = MakeOptions<float>(
      max_distance, per_head_tables, ak.has_value(), av.has_value(), causal,
      std::move(key_lengths), query_offset, rows);
  ApplyScheme(scheme, ak.has_value(), bias.has_value(), pb.has_value(), o);
  const AttentionInputs<float> in{.q = ShapeView(q, "q"),
                                  .k = ShapeView(k, "k"),
                                  .v = ShapeView(v, "v"),
                                  .ak = ShapeView(ak, "ak"),
                                  .av = ShapeView(av, "av"),
                                  .bias = ShapeView(bias, "bias"),
                                  .pb = ShapeView(pb, "pb")};
  const ResolvedAttention p = CheckAttention<float>(in, o);
  nb::dict d;
  d["heads"] = p.heads;
  d["kv_heads"] = p.kv_heads;
  d["table_rows"] = p.table_rows;
  d["t5_reach"] = p.t5_reach;
  d["alibi_slopes"] = p.alibi_slopes;
  d["query_offsets"] = p.query_offsets;
  d["key_lengths"] = p.key_lengths;
  d["key_starts"] = p.key_starts;
  d["min_offset"] = p.min_offset;
  d["max_offset"] = p.max_offset;
  return d;
}

// SchemeArgs as a Python class (relpos._relpos_ext.SchemeArgs), bound once.
void BindSchemeArgs(nb::module_& m) {
  nb::class_<SchemeArgs>(m, "SchemeArgs",
                         "Internal: the scheme options of one call.")
      .def(nb::init<>())
      .def_rw("buckets", &SchemeArgs::buckets)
      .def_rw("clip_left", &SchemeArgs::clip_left)
      .def_rw("clip_right", &SchemeArgs::clip_right)
      .def_rw("t5_num_buckets", &SchemeArgs::t5_num_buckets)
      .def_rw("t5_max_distance", &SchemeArgs::t5_max_distance)
      .def_rw("t5_bidirectional", &SchemeArgs::t5_bidirectional)
      .def_rw("score", &SchemeArgs::score)
      .def_rw("alibi_slopes", &SchemeArgs::alibi_slopes);
  nb::class_<RowArgs>(m, "RowArgs",
                      "Internal: the per-row offsets, key starts and score "
                      "scale of one call.")
      .def(nb::init<>())
      .def_rw("query_offsets", &RowArgs::query_offsets)
      .def_rw("key_starts", &RowArgs::key_starts)
      .def_rw("scale", &RowArgs::scale);
}

template <typename T>
void BindAttention(nb::module_& m, const std::string& suffix) {
  using namespace nb::literals;
  m.def(("forward_" + suffix).c_str(), &Forward<T>, "q"_a, "k"_a, "v"_a,
        "ak"_a.none(), "av"_a.none(), "out"_a, "lse"_a, "max_distance"_a,
        "per_head_tables"_a, "causal"_a, "key_lengths"_a,
        "query_offset"_a.none(), "bias"_a.none() = nb::none(),
        "pb"_a.none() = nb::none(), "scheme"_a = SchemeArgs(),
        "rows"_a = RowArgs(),
        "Internal: fills out and lse. Use relpos.attention instead.");
  m.def(("backward_" + suffix).c_str(), &Backward<T>, "q"_a, "k"_a, "v"_a,
        "ak"_a.none(), "av"_a.none(), "out"_a, "lse"_a, "dout"_a, "dq"_a,
        "dk"_a, "dv"_a, "dak"_a.none(), "dav"_a.none(), "max_distance"_a,
        "per_head_tables"_a, "causal"_a, "key_lengths"_a,
        "query_offset"_a.none(), "bias"_a.none() = nb::none(),
        "pb"_a.none() = nb::none(), "dbias"_a.none() = nb::none(),
        "dpb"_a.none() = nb::none(), "scheme"_a = SchemeArgs(),
        "rows"_a = RowArgs(),
        "Internal: fills the gradients. Use relpos.attention_backward.");
}

// docs/math.md section 5 initialisation with relpos's own generator: the same
// numbers for a given seed on every platform.
void InitTable(OutArray<float> table, const std::string& kind, double scale,
               uint64_t seed) {
  TableInitOptions o;
  if (kind == "xavier_normal") {
    o.kind = TableInit::kXavierNormal;
  } else if (kind == "xavier_uniform") {
    o.kind = TableInit::kXavierUniform;
  } else if (kind == "zeros") {
    o.kind = TableInit::kZeros;
  } else {
    throw InvalidArgument("relpos: init must be 'xavier_normal', "
                          "'xavier_uniform' or 'zeros' (got '" + kind + "')");
  }
  o.scale = scale;
  o.seed = seed;
  const TensorView<float> view = ToView<float>(table, "table");
  nb::gil_scoped_release release;
  InitRelativeTable(view, o);
}

}  // namespace
}  // namespace relpos

NB_MODULE(_relpos_ext, m) {
  m.doc() = "relpos C++ core (internal; use the relpos package)";
  m.attr("__version__") = RELPOS_VERSION_STRING;

  // InvalidArgument is the caller's fault: ValueError, as numpy and PyTorch
  // do for bad shapes; ResourceError (a plan that does not fit in memory) is
  // MemoryError. Every other relpos::Error is a RuntimeError.
  nb::register_exception_translator(
      [](const std::exception_ptr& p, void*) {
        try {
          std::rethrow_exception(p);
        } catch (const relpos::InvalidArgument& e) {
          PyErr_SetString(PyExc_ValueError, e.what());
        } catch (const relpos::ResourceError& e) {
          PyErr_SetString(PyExc_MemoryError, e.what());
        } catch (const relpos::Error& e) {
          PyErr_SetString(PyExc_RuntimeError, e.what());
        }
      });

  relpos::BindSchemeArgs(m);
  relpos::BindAttention<float>(m, "f32");
  relpos::BindAttention<double>(m, "f64");
  m.def("check_attention_problem", &relpos::CheckProblem, nb::arg("q"),
        nb::arg("k"), nb::arg("v"), nb::arg("ak").none(),
        nb::arg("av").none(), nb::arg("bias").none(), nb::arg("pb").none(),
        nb::arg("max_distance"), nb::arg("per_head_tables"),
        nb::arg("causal"), nb::arg("key_lengths"),
        nb::arg("query_offset").none(), nb::arg("scheme"), nb::arg("rows"),
        "Internal: the C++ core's checks of a call, on shapes; returns the "
        "resolved problem. Used by relpos.triton.");
  m.def("limit_cpu_isa", &relpos::LimitCpuIsa, nb::arg("isa"),
        "Internal: relpos::LimitCpuIsa (relpos/cpu.h); relpos applies "
        "RELPOS_CPU_ISA with it at import.");
  m.def("cpu_isa", &relpos::CpuIsa,
        "The instruction set relpos's int8 products dispatch to "
        "(relpos/cpu.h).");
  m.def("init_relative_table", &relpos::InitTable, nb::arg("table"),
        nb::arg("kind"), nb::arg("scale"), nb::arg("seed"),
        "Internal: fills a float32 table. Use relpos.init_relative_table.");
  relpos::BindPositionSchemes(m);
  relpos::BindSchemes(m);
  relpos::BindModel(m);
  relpos::BindInspect(m);
  relpos::BindTranslate(m);
  relpos::BindExperiment(m);
}
