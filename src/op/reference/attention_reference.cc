#include "reference/attention_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace relpos {
namespace {

template <typename T>
T Dot(const T* a, const T* b, int64_t n) {
  T s = 0;
  for (int64_t t = 0; t < n; ++t) s += a[t] * b[t];
  return s;
}

// y += alpha * x
template <typename T>
void Axpy(T alpha, const T* x, T* y, int64_t n) {
  for (int64_t t = 0; t < n; ++t) y[t] += alpha * x[t];
}

// Pointers to the data of one (batch, head) pair. ak is set only for the
// vector score term, bias (row h of [H, nb]) only for the scalar table, pb
// (row h of [H, dk]) only with the position query bias; alibi is true for
// the ALiBi score term with slope `slope`.
template <typename T>
struct HeadSlice {
  const T *q, *k, *v, *ak, *av, *bias, *pb;
  bool alibi = false;
  T slope = 0;
  // rows[j - i + Nq - 1] is the table row of the pair (i, j): the bucket
  // map depends on j - (i + off_b) only, so it is evaluated once per
  // distance of the batch item (T5's takes a logarithm).
  const int64_t* rows = nullptr;
  int64_t offset = 0;  // off_b of the batch item
  int64_t Row(int64_t q_len, int64_t i, int64_t j) const {
    return rows[j - i + q_len - 1];
  }
};

// The table row of every index difference j - i in [-(Nq - 1), Nk - 1] of
// batch item b (distance j - i - off_b).
std::vector<int64_t> DistanceRows(const AttentionProblem& p, int64_t b) {
  std::vector<int64_t> rows(p.q_len + p.k_len - 1);
  for (int64_t d = 0; d < static_cast<int64_t>(rows.size()); ++d)
    rows[d] = p.BucketOf(d - (p.q_len - 1) - p.QueryOffset(b));
  return rows;
}

template <typename T>
HeadSlice<T> Slice(const AttentionProblem& p, const AttentionInputs<T>& in,
                   int64_t b, int64_t h, const std::vector<int64_t>& rows) {
  const int64_t bh = b * p.heads + h;
  const int64_t bkv = b * p.kv_heads + p.KvHead(h);  // grouped-query
  HeadSlice<T> s;
  s.rows = rows.data();
  s.offset = p.QueryOffset(b);
  s.q = in.q.data() + bh * p.q_len * p.dk;
  s.k = in.k.data() + bkv * p.k_len * p.dk;
  s.v = in.v.data() + bkv * p.k_len * p.dv;
  s.ak = p.VectorScore() ? in.ak.data() + p.TableOffset(h, p.dk) : nullptr;
  s.av = p.value_term ? in.av.data() + p.TableOffset(h, p.dv) : nullptr;
  s.bias = p.scalar_table ? in.bias.data() + h * p.TableRows() : nullptr;
  s.pb = p.position_query_bias ? in.pb.data() + h * p.dk : nullptr;
  s.alibi = p.AlibiScore();
  if (s.alibi) s.slope = static_cast<T>(p.alibi_slopes[h]);
  return s;
}

// The position-term query of row i: q_i, or q_i + pb with the position
// query bias (Transformer-XL), written to `biased`.
template <typename T>
const T* PositionQuery(const AttentionProblem& p, const HeadSlice<T>& s,
                       int64_t i, std::vector<T>& biased) {
  const T* qi = s.q + i * p.dk;
  if (!s.pb) return qi;
  for (int64_t t = 0; t < p.dk; ++t) biased[t] = qi[t] + s.pb[t];
  return biased.data();
}

// The scaled score s_ij of docs/math.md section 8: the content term and the
// vector term are multiplied by the scale (1 / sqrt(dk) by default), the
// scalar table and ALiBi are not.
// qp is PositionQuery(i).
template <typename T>
T Score(const AttentionProblem& p, const HeadSlice<T>& s, int64_t i,
        int64_t j, const T* qp, T scale) {
  const T* qi = s.q + i * p.dk;
  T score = Dot(qi, s.k + j * p.dk, p.dk);
  if (s.ak) score += Dot(qp, s.ak + s.Row(p.q_len, i, j) * p.dk, p.dk);
  score *= scale;
  if (s.bias) score += s.bias[s.Row(p.q_len, i, j)];
  if (s.alibi) {
    // |r| in int64 (|r| <= 2^41), then -m |r| in the call's precision.
    const int64_t r = j - (i + s.offset);
    score -= s.slope * static_cast<T>(r < 0 ? -r : r);
  }
  return score;
}

// Probabilities p_ij of row i over its visible keys begin <= j < end
// (docs/math.md section 2): s_ij = (q_i . k_j + q_i . AK[r(i,j)]) / sqrt(dk)
// for Shaw, Score() for every scheme; p = softmax(s). Returns the
// log-sum-exp of the scores.
template <typename T>
T RowProbabilities(const AttentionProblem& p, const HeadSlice<T>& s, int64_t i,
                   int64_t begin, int64_t end, std::vector<T>& prob) {
  const T scale = p.ScoreScale<T>();
  std::vector<T> biased(s.pb ? p.dk : 0);
  const T* qp = PositionQuery(p, s, i, biased);
  T max_score = -std::numeric_limits<T>::infinity();
  for (int64_t j = begin; j < end; ++j) {
    prob[j] = Score(p, s, i, j, qp, scale);
    max_score = std::max(max_score, prob[j]);
  }
  T sum = 0;
  for (int64_t j = begin; j < end; ++j) {
    prob[j] = std::exp(prob[j] - max_score);
    sum += prob[j];
  }
  for (int64_t j = begin; j < end; ++j) prob[j] /= sum;
  return max_score + std::log(sum);
}

}  // namespace

template <typename T>
void ReferenceForward(const AttentionProblem& p, const AttentionInputs<T>& in,
                      T* out, T* lse) {
  std::vector<T> prob(p.k_len);
  for (int64_t b = 0; b < p.batch; ++b) {
    const std::vector<int64_t> rows = DistanceRows(p, b);
    const int64_t begin = p.KeyBegin(b);
    for (int64_t h = 0; h < p.heads; ++h) {
      const HeadSlice<T> s = Slice(p, in, b, h, rows);
      const int64_t bh = b * p.heads + h;
      for (int64_t i = 0; i < p.q_len; ++i) {
        T* oi = out + (bh * p.q_len + i) * p.dv;
        std::fill(oi, oi + p.dv, T(0));
        const int64_t end = p.KeyEnd(b, i);
        if (end <= begin) {  // sees no key: zero output, lse = -inf
          if (lse) lse[bh * p.q_len + i] = -std::numeric_limits<T>::infinity();
          continue;
        }
        const T row_lse = RowProbabilities(p, s, i, begin, end, prob);
        if (lse) lse[bh * p.q_len + i] = row_lse;
        // o_i = sum_j p_ij v_j + sum_j p_ij AV[r(i,j)]
        for (int64_t j = begin; j < end; ++j) {
          Axpy(prob[j], s.v + j * p.dv, oi, p.dv);
          if (s.av) Axpy(prob[j], s.av + s.Row(p.q_len, i, j) * p.dv, oi, p.dv);
        }
      }
    }
  }
}

template <typename T>
void ReferenceBackward(const AttentionProblem& p, const AttentionInputs<T>& in,
                       const T* dout, const AttentionGrads<T>& grads) {
  // Every provided gradient starts at zero and is accumulated pair by pair.
  // Missing ones go to scratch so the loop below needs no branches on them.
  auto target = [](TensorView<T> g, std::vector<T>& scratch, int64_t n) {
    if (g.empty()) {
      scratch.assign(n, T(0));
      return scratch.data();
    }
    std::fill(g.data(), g.data() + g.numel(), T(0));
    return g.data();
  };
  const int64_t table_heads = p.per_head_tables ? p.heads : 1;
  std::vector<T> sq, sk, sv, sak, sav, sbias, spb;
  T* dq = target(grads.dq, sq, p.batch * p.heads * p.q_len * p.dk);
  T* dk = target(grads.dk, sk, p.batch * p.kv_heads * p.k_len * p.dk);
  T* dv = target(grads.dv, sv, p.batch * p.kv_heads * p.k_len * p.dv);
  T* dak = target(grads.dak, sak, table_heads * p.TableRows() * p.dk);
  T* dav = target(grads.dav, sav, table_heads * p.TableRows() * p.dv);
  T* dbias = target(grads.dbias, sbias, p.heads * p.TableRows());
  T* dpb = target(grads.dpb, spb, p.heads * p.dk);

  const T scale = p.ScoreScale<T>();
  std::vector<T> prob(p.k_len), dprob(p.k_len), biased(p.dk);
  for (int64_t b = 0; b < p.batch; ++b) {
    const std::vector<int64_t> rows = DistanceRows(p, b);
    const int64_t begin = p.KeyBegin(b);
    for (int64_t h = 0; h < p.heads; ++h) {
      const HeadSlice<T> s = Slice(p, in, b, h, rows);
      const int64_t bh = b * p.heads + h;
      // Grouped-query: the group's query heads add into one key/value head.
      const int64_t bkv = b * p.kv_heads + p.KvHead(h);
      T* dq_bh = dq + bh * p.q_len * p.dk;
      T* dk_bh = dk + bkv * p.k_len * p.dk;
      T* dv_bh = dv + bkv * p.k_len * p.dv;
      T* dak_h = dak + p.TableOffset(h, p.dk);
      T* dav_h = dav + p.TableOffset(h, p.dv);
      T* dbias_h = dbias + h * p.TableRows();
      T* dpb_h = dpb + h * p.dk;
      for (int64_t i = 0; i < p.q_len; ++i) {
        const int64_t end = p.KeyEnd(b, i);
        if (end <= begin) continue;  // no key seen: zero gradient
        RowProbabilities(p, s, i, begin, end, prob);
        const T* qi = s.q + i * p.dk;
        const T* qp = PositionQuery(p, s, i, biased);  // q_i (+ pb)
        const T* doi = dout + (bh * p.q_len + i) * p.dv;
        // dP_ij = dO_i . v_j + dO_i . AV[r(i,j)];  D_i = sum_j p_ij dP_ij
        T d_row = 0;
        for (int64_t j = begin; j < end; ++j) {
          dprob[j] = Dot(doi, s.v + j * p.dv, p.dv);
          if (s.av) dprob[j] += Dot(doi, s.av + s.Row(p.q_len, i, j) * p.dv, p.dv);
          d_row += prob[j] * dprob[j];
        }
        for (int64_t j = begin; j < end; ++j) {
          const int64_t r = s.Row(p.q_len, i, j);
          // dV_j += p_ij dO_i;  dAV[r] += p_ij dO_i
          Axpy(prob[j], doi, dv_bh + j * p.dv, p.dv);
          if (s.av) Axpy(prob[j], doi, dav_h + r * p.dv, p.dv);
          // dS_ij = p_ij (dP_ij - D_i); the scalar table enters the score
          // unscaled: dB[h, r] += dS_ij.
          const T ds_raw = prob[j] * (dprob[j] - d_row);
          if (s.bias) dbias_h[r] += ds_raw;
          // The vector terms carry the scale (1/sqrt(dk) by default).
          const T ds = ds_raw * scale;
          // dQ_i += dS_ij (k_j + AK[r]);  dK_j += dS_ij q_i;
          // dAK[r] += dS_ij (q_i + pb);   dpb += dS_ij AK[r]
          Axpy(ds, s.k + j * p.dk, dq_bh + i * p.dk, p.dk);
          Axpy(ds, qi, dk_bh + j * p.dk, p.dk);
          if (s.ak) {
            Axpy(ds, s.ak + r * p.dk, dq_bh + i * p.dk, p.dk);
            Axpy(ds, qp, dak_h + r * p.dk, p.dk);
            if (s.pb) Axpy(ds, s.ak + r * p.dk, dpb_h, p.dk);
          }
        }
      }
    }
  }
}

template void ReferenceForward<float>(const AttentionProblem&,
                                      const AttentionInputs<float>&, float*,
                                      float*);
template void ReferenceForward<double>(const AttentionProblem&,
                                       const AttentionInputs<double>&, double*,
                                       double*);
template void ReferenceBackward<float>(const AttentionProblem&,
                                       const AttentionInputs<float>&,
                                       const float*,
                                       const AttentionGrads<float>&);
template void ReferenceBackward<double>(const AttentionProblem&,
                                        const AttentionInputs<double>&,
                                        const double*,
                                        const AttentionGrads<double>&);

}  // namespace relpos
