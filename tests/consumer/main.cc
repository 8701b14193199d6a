// Uses only the installed public headers, as a user's program would: the
// README's C++ example. Forward and backward of causal relative attention,
// then two checks that need no oracle.
#include <cmath>
#include <cstdio>
#include <vector>

#include "relpos/relpos.h"

int main() {
  const int64_t B = 1, H = 2, N = 40, d = 16, k = 4, rows = 2 * k + 1;
  std::vector<float> q(B * H * N * d), kk(q.size()), v(q.size());
  for (size_t t = 0; t < q.size(); ++t) {
    q[t] = std::sin(0.1f * t), kk[t] = std::cos(0.3f * t), v[t] = 1.0f;
  }
  std::vector<float> ak(rows * d), av(rows * d);
  relpos::InitRelativeTable({ak.data(), {rows, d}}, {.seed = 1});
  relpos::InitRelativeTable({av.data(), {rows, d}}, {.seed = 2});

  const relpos::AttentionInputs<float> in{
      .q = {q.data(), {B, H, N, d}}, .k = {kk.data(), {B, H, N, d}},
      .v = {v.data(), {B, H, N, d}}, .ak = {ak.data(), {rows, d}},
      .av = {av.data(), {rows, d}}};
  relpos::AttentionOptions opt;
  opt.max_distance = k;
  opt.causal = true;
  std::vector<float> out(B * H * N * d), lse(B * H * N);
  relpos::AttentionForward<float>(in, {out.data(), {B, H, N, d}},
                                  {lse.data(), {B, H, N}}, opt);

  std::vector<float> dout(out.size(), 1.0f), dq(q.size()), dk(kk.size()),
      dv(v.size()), dak(ak.size()), dav(av.size());
  relpos::AttentionBackward<float>(
      in, {out.data(), {B, H, N, d}}, {lse.data(), {B, H, N}},
      {dout.data(), {B, H, N, d}},
      {.dq = {dq.data(), {B, H, N, d}}, .dk = {dk.data(), {B, H, N, d}},
       .dv = {dv.data(), {B, H, N, d}}, .dak = {dak.data(), {rows, d}},
       .dav = {dav.data(), {rows, d}}},
      opt);

  // Every value row is all ones, so o_i = 1 + sum_j p_ij AV[r(i,j)]; and
  // since each row's probabilities sum to one, dAV's entries sum to
  // (number of rows) x d when dout is all ones.
  double dav_sum = 0;
  for (float x : dav) dav_sum += x;
  if (std::fabs(dav_sum - double(B * H * N * d)) > 1e-3 * B * H * N * d) {
    std::printf("consumer: sum of dAV is %f, want %lld\n", dav_sum,
                static_cast<long long>(B * H * N * d));
    return 1;
  }
  for (float x : out) {
    if (!std::isfinite(x)) {
      std::printf("consumer: non-finite output\n");
      return 1;
    }
  }
  std::printf("relpos %s: consumer ok\n", RELPOS_VERSION_STRING);
  return 0;
}
