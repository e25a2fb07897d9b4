// The C++ side of the Python package's bitwise test: runs one method through the library alone
// on q.npy, k.npy, v.npy ([h, s, d], as save_qkv writes them) and writes out.npy (in the
// inputs' dtype, as spattn.attention returns it) and lse.npy ([1, heads, q_len]); prints the
// report's counts as JSON on stdout.
//   spattn_run_method DIR SPEC CAUSAL(0|1)
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "spattn/io.hpp"
#include "spattn/method.hpp"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: spattn_run_method DIR SPEC CAUSAL\n");
    return 2;
  }
  try {
    const std::string dir = std::string(argv[1]) + "/";
    const spattn::QKV x = spattn::load_qkv(dir);
    spattn::AttnOptions opt;
    opt.causal = std::string(argv[3]) == "1";
    const auto method = spattn::make_method(argv[2]);
    const spattn::Tensor out(x.q.dtype(), x.q.heads(), x.q.seq(), x.q.dim());
    std::vector<float> lse(size_t(x.q.heads() * x.q.seq()));
    const spattn::MethodReport r = method->run(x.q, x.k, x.v, out, opt, lse.data());
    spattn::write_npy(dir + "out.npy", out);
    spattn::write_npy(dir + "lse.npy", spattn::TensorView::hsd(lse.data(), spattn::DType::f32, 1,
                                                               x.q.heads(), x.q.seq()));
    nlohmann::json j = {{"score_entries", r.stats.score_entries},
                        {"causal_entries", r.stats.causal_entries},
                        {"tiles_visited", r.stats.tiles_visited},
                        {"tiles_skipped", r.stats.tiles_skipped},
                        {"path", spattn::kernel_path_name(r.path)},
                        {"extras", r.extras},
                        {"per_head", r.per_head},
                        {"mask_blocks", r.mask ? r.mask->block_count() : -1}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spattn_run_method: %s\n", e.what());
    return 2;
  }
}
