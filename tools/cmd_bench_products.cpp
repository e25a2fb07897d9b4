// `spattn bench-products`: prefill's weight products on one shape, each integer product
// kernel's GOP/s against the int8 dot-product (vpdpbusd) peak measured in the same process, and
// the widening f32 product beside it where it takes the type, against the f32 FMA peak; bf16
// weights on vdpbf16ps beside ggml's product of them, against the bf16 dot-product peak.
#include <fmt/format.h>

#include <memory>

#include "cli.hpp"
#include "spattn/attention.hpp"
#include "spattn/product_bench.hpp"

namespace spattn::cli {
namespace {

void run_bench_products(const ProductBenchOptions& o) {
  const ProductBench b = bench_products(o);
  const MachinePeak& pk = b.peak;
  fmt::print(
      "peak (measured in this process): int8 dot (vpdpbusd) {}, f32 FMA {:.1f} GFLOP/s; "
      "SIMD target {}\n",
      pk.int8_dot_gops > 0 ? fmt::format("{:.1f} GOP/s", pk.int8_dot_gops) : "none", pk.fma_gflops,
      pk.simd_target);
  fmt::print("C[{} x {}] = X[{} x {}] W^T, {} threads; integer products on {}\n\n", o.n, o.m, o.n,
             o.k, o.threads, b.vnni ? "AVX-512 VNNI" : "portable loops (no AVX-512 VNNI)");
  fmt::print(
      "| type | int8 GOP/s | % int8 peak | of it quantizing | unpacking alone | "
      "over ggml's repack: GOP/s, % peak, unpacking | widened f32 GFLOP/s | % FMA peak | "
      "int8 / widened |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  const auto of_peak = [&](double gops) {
    return pk.int8_dot_gops > 0 ? fmt::format("{:.1f}%", 100 * gops / pk.int8_dot_gops) : "-";
  };
  for (const ProductBenchResult& r : b.results) {
    const bool widen = r.widen_gflops > 0;
    const std::string repacked = r.repacked_gops > 0
                                     ? fmt::format("{:.1f}, {}, {:.2f} ms", r.repacked_gops,
                                                   of_peak(r.repacked_gops), r.repacked_unpack_ms)
                                     : "-";
    fmt::print("| {} | {:.1f} | {} | {:.2f} ms | {:.2f} ms | {} | {} | {} | {} |\n", r.type,
               r.int8_gops, of_peak(r.int8_gops), r.quantize_ms, r.unpack_ms, repacked,
               widen ? fmt::format("{:.1f}", r.widen_gflops) : "-",
               widen ? fmt::format("{:.1f}%", 100 * r.widen_gflops / pk.fma_gflops) : "-",
               widen ? fmt::format("{:.2f}x", r.int8_gops / r.widen_gflops) : "-");
  }
  if (b.bf16) {
    const ProductBenchBf16& r = *b.bf16;
    const auto of_bf16 = [&](double g) {
      return pk.bf16_dot_gflops > 0 ? fmt::format("{:.1f}%", 100 * g / pk.bf16_dot_gflops) : "-";
    };
    fmt::print(
        "\nbf16 weights, peak (this process): bf16 dot (vdpbf16ps) {}; spattn's product on {}\n\n"
        "| type | spattn GFLOP/s | % bf16 peak | of it rounding | ggml GFLOP/s | % bf16 peak | "
        "spattn / ggml |\n|---|---:|---:|---:|---:|---:|---:|\n",
        pk.bf16_dot_gflops > 0 ? fmt::format("{:.1f} GFLOP/s", pk.bf16_dot_gflops) : "none",
        b.bf16_dot ? "AVX512_BF16" : "portable loops (no AVX512_BF16)");
    fmt::print("| bf16 | {:.1f} | {} | {:.2f} ms | {:.1f} | {} | {:.2f}x |\n", r.gflops,
               of_bf16(r.gflops), r.round_ms, r.ggml_gflops, of_bf16(r.ggml_gflops),
               r.gflops / r.ggml_gflops);
  }
}

}  // namespace

void add_bench_products_command(CLI::App& root) {
  auto o = std::make_shared<ProductBenchOptions>();
  CLI::App* cmd = root.add_subcommand(
      "bench-products",
      "time prefill's quantized and bf16 weight products against this machine's peaks");
  cmd->add_option("-m,--rows", o->m, "weight rows (outputs)")->capture_default_str();
  cmd->add_option("-k,--cols", o->k, "columns (a multiple of 256)")->capture_default_str();
  cmd->add_option("-n,--tokens", o->n, "activation rows (a prompt's chunk)")->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "threads (0: all)")->capture_default_str();
  cmd->add_option("--repeat", o->repeat, "timed calls a kernel (the best counts)")
      ->capture_default_str();
  cmd->add_option("--types", o->types, "weight types, ggml's names: q8_0,q4_K,bf16 (default: all)")
      ->delimiter(',');
  cmd->callback([o] { run_bench_products(*o); });
}

}  // namespace spattn::cli
