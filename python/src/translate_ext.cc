// relpos._relpos_ext, translation: BLEU / chrF (as sacrebleu computes them),
// the 13a tokeniser, gettext catalogs, the parallel corpus and a
// checkpoint's Translator (text in, text out), as plain Python values (python/relpos/translate.py documents them and checks the
// arguments). The GIL is released while relpos computes.
#include "translate_ext.h"

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "relpos/data/metrics.h"
#include "relpos/data/parallel_text.h"
#include "relpos/lab/translation.h"
#include "model_ext.h"

namespace nb = nanobind;

namespace relpos {
namespace {

nb::dict BleuDict(const BleuScore& s) {
  nb::dict d;
  d["score"] = s.score;
  d["counts"] = std::vector<int64_t>(s.stats.correct.begin(), s.stats.correct.end());
  d["totals"] = std::vector<int64_t>(s.stats.total.begin(), s.stats.total.end());
  d["precisions"] =
      std::vector<double>(s.precisions.begin(), s.precisions.end());
  d["bp"] = s.brevity_penalty;
  d["sys_len"] = s.stats.hyp_len;
  d["ref_len"] = s.stats.ref_len;
  return d;
}

nb::list Pairs(const std::vector<TranslationPair>& pairs) {
  nb::list out;
  for (const TranslationPair& p : pairs) {
    out.append(nb::make_tuple(p.source, p.target, p.catalog));
  }
  return out;
}

nb::dict StatsDict(const ParallelTextStats& s) {
  nb::dict d;
  d["files_found"] = s.files_found;
  d["catalogs_read"] = s.catalogs_read;
  d["catalogs_skipped"] = s.catalogs_skipped;
  d["same_file"] = s.same_file;
  d["no_language"] = s.no_language;
  d["skipped"] = s.skipped;
  d["messages"] = s.messages;
  d["header"] = s.header;
  d["fuzzy"] = s.fuzzy;
  d["context_only"] = s.context_only;
  d["untranslated"] = s.untranslated;
  d["unmatched"] = s.unmatched;
  d["bad_text"] = s.bad_text;
  d["too_long"] = s.too_long;
  d["identical"] = s.identical;
  d["duplicate"] = s.duplicate;
  d["plural"] = s.plural;
  d["pairs"] = s.pairs;
  d["train_pairs"] = s.train_pairs;
  d["test_pairs"] = s.test_pairs;
  d["train_catalogs"] = s.train_catalogs;
  d["test_catalogs"] = s.test_catalogs;
  d["tsv_lines"] = s.tsv_lines;
  return d;
}

nb::dict CatalogDict(const Catalog& c) {
  nb::list messages;
  for (const CatalogMessage& m : c.messages) {
    messages.append(nb::make_tuple(
        m.has_context ? nb::cast(m.context) : nb::none(), m.msgid, m.msgstr,
        m.plural, m.fuzzy));
  }
  nb::dict d;
  d["language"] = c.language;
  d["charset"] = c.charset;
  d["has_header"] = c.has_header;
  d["bad_encoding"] = c.bad_encoding;
  d["messages"] = messages;
  return d;
}

// (text, tokens, log_prob, score, ended_by_eos, source_tokens) per line.
using TranslatedLine = std::tuple<std::string, std::vector<int32_t>, double,
                                  double, bool, int64_t>;

std::vector<TranslatedLine> Lines(std::vector<TextTranslation> t) {
  std::vector<TranslatedLine> out;
  for (TextTranslation& x : t) {
    out.emplace_back(std::move(x.text), std::move(x.best.tokens),
                     x.best.log_prob, x.best.score, x.best.ended_by_eos,
                     x.source_tokens);
  }
  return out;
}

void BindTranslator(nb::module_& m) {
  nb::class_<Translator>(m, "Translator",
                         "Internal: use relpos.translate.Translator.")
      .def_static("load", &Translator::Load, nb::arg("checkpoint_dir"),
                  nb::arg("compute_type") = "float32",
                  nb::call_guard<nb::gil_scoped_release>())
      .def("encode", &Translator::Encode, nb::arg("text"))
      .def("decode", &Translator::Decode, nb::arg("ids"))
      .def("max_source_tokens", &Translator::max_source_tokens)
      .def("compute_type",
           [](Translator& self) { return self.model().compute_type(); })
      .def(
          "translate",
          [](Translator& self, const std::vector<std::string>& lines,
             int64_t beam_size, const std::string& length_penalty,
             double alpha, double max_length_ratio, int64_t max_length,
             int threads, int64_t max_batch_size,
             const std::string& compute_type) {
            DecodeOptions o = MakeDecodeOptions(
                beam_size, length_penalty, alpha, max_length_ratio, max_length,
                /*bos=*/-1, /*eos=*/-1, threads, compute_type);
            o.max_batch_size = max_batch_size;
            std::vector<TextTranslation> t;
            {
              nb::gil_scoped_release release;
              t = self.Translate(lines, o);
            }
            return Lines(std::move(t));
          },
          nb::arg("lines"), nb::arg("beam_size"), nb::arg("length_penalty"),
          nb::arg("alpha"), nb::arg("max_length_ratio"),
          nb::arg("max_length"), nb::arg("threads"),
          nb::arg("max_batch_size"), nb::arg("compute_type"));
}

}  // namespace

void BindTranslate(nb::module_& m) {
  BindTranslator(m);
  m.def(
      "translate_bleu",
      [](const std::vector<std::string>& hyps,
         const std::vector<std::string>& refs) {
        BleuScore s;
        {
          nb::gil_scoped_release release;
          s = CorpusBleu(hyps, refs);
        }
        return BleuDict(s);
      },
      nb::arg("hypotheses"), nb::arg("references"),
      "Internal: use relpos.translate.bleu.");
  m.def(
      "translate_sentence_bleu",
      [](const std::string& hyp, const std::string& ref) {
        return BleuDict(SentenceBleu(hyp, ref));
      },
      nb::arg("hypothesis"), nb::arg("reference"),
      "Internal: use relpos.translate.sentence_bleu.");
  m.def("translate_chrf", &CorpusChrf, nb::arg("hypotheses"),
        nb::arg("references"), nb::call_guard<nb::gil_scoped_release>(),
        "Internal: use relpos.translate.chrf.");
  m.def("translate_sentence_chrf", &SentenceChrf, nb::arg("hypothesis"),
        nb::arg("reference"), "Internal: use relpos.translate.sentence_chrf.");
  m.def("translate_tokenize_13a", &Tokenize13a, nb::arg("segment"),
        "Internal: use relpos.translate.tokenize_13a.");
  m.def(
      "translate_read_catalog",
      [](const std::string& path) {
        Catalog c;
        {
          nb::gil_scoped_release release;
          c = ReadCatalog(path);
        }
        return CatalogDict(c);
      },
      nb::arg("path"), "Internal: use relpos.translate.read_catalog.");
  m.def(
      "translate_load_parallel_text",
      [](const std::string& path, const std::string& source_language,
         const std::string& target_language) {
        ParallelText t;
        {
          nb::gil_scoped_release release;
          t = LoadParallelText({.path = path,
                                .source_language = source_language,
                                .target_language = target_language});
        }
        nb::dict d;
        d["train"] = Pairs(t.train);
        d["test"] = Pairs(t.test);
        d["catalogs"] = t.catalogs;
        std::vector<std::string> held_out;
        for (size_t i = 0; i < t.catalogs.size(); ++i) {
          if (t.test_catalog[i]) held_out.push_back(t.catalogs[i]);
        }
        d["test_catalogs"] = held_out;
        d["split"] = t.split;
        d["stats"] = StatsDict(t.stats);
        d["description"] = t.description;
        return d;
      },
      nb::arg("path"), nb::arg("source_language"), nb::arg("target_language"),
      "Internal: use relpos.translate.load_parallel_text.");
}

}  // namespace relpos
