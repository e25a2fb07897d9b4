// Writes the seed corpora for `make fuzz`: small valid files of every format the fuzz
// targets read, so the fuzzer starts from inputs that reach deep into each parser.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "spattn/calibration.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "spattn/h2o_trace.hpp"
#include "spattn/io.hpp"
#include "spattn/model_maker.hpp"
#include "quant_types.hpp"

namespace fs = std::filesystem;
using namespace spattn;

namespace {

void save(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}
void save(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
}

void gguf_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  // Every value type and tensor type, v2 and v3, two alignments.
  for (uint32_t version : {2u, 3u}) {
    gguf::Writer w;
    w.set_version(version);
    w.set("general.architecture", "llama");
    w.set("u8", uint8_t(1));
    w.set("i16", int16_t(-2));
    w.set("u64", uint64_t(3));
    w.set("f64", 0.5);
    w.set("flag", true);
    w.set("strs", std::vector<std::string>{"a", "bc"});
    w.set("ints", std::vector<int32_t>{1, -1});
    w.set("floats", std::vector<float>{1.5f});
    std::vector<float> x(64);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i));
    std::vector<uint8_t> q8(34 * 2), h(128);
    gguf::quantize_row(gguf::GgmlType::q8_0, x.data(), q8.data(), 64);
    gguf::quantize_row(gguf::GgmlType::f16, x.data(), h.data(), 64);
    w.add_tensor("a", gguf::GgmlType::f32, {8, 2}, x.data());
    w.add_tensor("b", gguf::GgmlType::q8_0, {64}, q8.data());
    w.add_tensor("c", gguf::GgmlType::f16, {4, 4, 2, 2}, h.data());
    w.add_tensor("d", gguf::GgmlType::bf16, {16}, h.data());
    save(dir / ("values_v" + std::to_string(version) + ".gguf"), w.bytes(version == 2 ? 32 : 8));
  }
  // Tiny made-up models with both tokenizer kinds (the tokenizer is reached from GGUF too).
  for (const char* tok : {"gpt2", "llama"}) {
    ModelShape s;
    s.layers = 1, s.dim = 8, s.heads = 2, s.kv_heads = 1, s.ffn = 8, s.tokenizer = tok;
    s.vocab = std::string(tok) == "gpt2" ? 270 : 40;
    const fs::path p = dir / (std::string("model_") + tok + ".gguf");
    make_model(p.string(), s);
  }
  {  // A mixture of experts (the experts' 3-D tensors and their counts) with YaRN scaling.
    ModelShape s;
    s.arch = "qwen3moe";
    s.layers = 1, s.dim = 8, s.heads = 2, s.kv_heads = 1, s.ffn = 8, s.vocab = 270;
    s.experts = 3, s.experts_used = 2, s.expert_ffn = 4;
    s.rope_scaling = "yarn", s.rope_factor = 4, s.rope_original_context = 64;
    make_model((dir / "model_qwen3moe.gguf").string(), s);
  }
  {  // gpt-oss: biases, sinks, experts' biases, the sliding window and its pattern.
    ModelShape s;
    s.arch = "gpt-oss";
    s.layers = 2, s.dim = 8, s.heads = 2, s.kv_heads = 1, s.ffn = 8, s.vocab = 270;
    s.experts = 3, s.experts_used = 2, s.expert_ffn = 4, s.sliding_window = 4;
    make_model((dir / "model_gpt_oss.gguf").string(), s);
  }
}

// For the quantized-block target: per ggml type, its index byte and two rows of two blocks,
// quantized from a smooth signal where ggml has a quantizer that needs no importance matrix,
// else seeded pseudo-random bytes (integer types, q8_K, the imatrix-only IQ types).
void quant_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  const auto& types = fuzz::quant_fuzz_types();
  uint64_t state = 20;
  for (size_t i = 0; i < types.size(); ++i) {
    const gguf::GgmlType t = types[i];
    const int64_t n = 2 * gguf::block_size(t);
    std::vector<uint8_t> b(1, uint8_t(i));
    for (int row = 0; row < 2; ++row) {
      std::vector<uint8_t> q(gguf::row_bytes(t, n));
      std::vector<float> x(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j)
        x[size_t(j)] = std::sin(0.1f * float(j + 7 * row)) * (1.0f + row);
      try {
        gguf::quantize_row(t, x.data(), q.data(), n);
      } catch (const Error&) {
        for (uint8_t& v : q) {
          state = state * 6364136223846793005ull + 1442695040888963407ull;
          v = uint8_t(state >> 56);
        }
      }
      b.insert(b.end(), q.begin(), q.end());
    }
    save(dir / (std::string(gguf::type_name(t)) + ".bin"), b);
  }
}

void npy_and_safetensors_seeds(const fs::path& npy, const fs::path& st) {
  fs::create_directories(npy);
  fs::create_directories(st);
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    Tensor x(t, 2, 3, 4);
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t s = 0; s < 3; ++s)
        for (int64_t d = 0; d < 4; ++d) x.view().set(i, s, d, float(i + s - d));
    write_npy((npy / (std::string(dtype_name(t)) + ".npy")).string(), x.view());
    Tensor y(t, 1, 2, 2);
    for (int64_t s = 0; s < 2; ++s)
      for (int64_t d = 0; d < 2; ++d) y.view().set(0, s, d, 1.0f);
    write_safetensors((st / (std::string(dtype_name(t)) + ".safetensors")).string(),
                      {{"q", x.view()}, {"k", y.view()}});
  }
}

void calibration_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  std::vector<CalibrationPoint> pts;
  for (int64_t len : {4096, 8192})
    for (int i = 0; i <= 12; ++i) {
      const double s = 0.2 + 0.05 * i;
      pts.push_back({len, 3e-4 * std::exp(12.0 * s) / std::pow(double(len), 0.3), s});
    }
  Calibration c = fit_blasst_calibration(pts, {});
  c.samples = 1, c.source = "seed", c.heads = 2, c.kv_heads = 1, c.dim = 64, c.dtype = "f32";
  c.checks.push_back({4096, 0.5, 1e-3, 0.51});
  save(dir / "calibration.json", calibration_to_json(c));
  save(dir / "array.json", std::string("[1, 2.5, \"x\", null, {\"a\": true}]"));
}

void tokenizer_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  save(dir / "ascii.txt", std::string("Hello world, it's 42!\n\tdef f(x):  return x\n"));
  save(dir / "utf8.txt",
       std::string("caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\xa6\x99 \xff\xfe"));
  // Case changes, contractions, a combining mark, paths: what GPT-4o's and Tekken's splits cut.
  save(dir / "cased.txt", std::string("HelloWorld DON'T it's \xc3\x89"
                                      "cole\xcc\x81 x'\xc5\xbf "
                                      "io/file.h>/\n//x 12345\r\n"));
}

// `spattn serve` bodies: the first byte picks the route (0 completion, 1 chat, 2 tokenize,
// 3 detokenize), as fuzz_serve reads them.
void serve_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  auto route = [](char r, const std::string& body) { return std::string(1, r) + body; };
  save(dir / "completion.json",
       route(0,
             "{\"prompt\": \"Once upon a time\", \"max_tokens\": 16, \"temperature\": 0.7, "
             "\"top_k\": 40, \"top_p\": 0.9, \"seed\": 3, \"stop\": [\"\\n\", \"end\"], "
             "\"stream\": true, \"spattn\": {\"attn\": \"chunked_h2o\"}}"));
  save(dir / "tokens.json",
       route(0, "{\"prompt\": [1, 2, 3], \"n_predict\": 2, \"cache_prompt\": false}"));
  save(dir / "chat.json",
       route(1,
             "{\"model\": \"m\", \"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, "
             "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"hi\"}]}], "
             "\"max_completion_tokens\": 8}"));
  save(dir / "tokenize.json",
       route(2, "{\"content\": \"caf\xc3\xa9\", \"add_special\": true, \"with_pieces\": true}"));
  save(dir / "detokenize.json", route(3, "{\"tokens\": [5, 6, 7]}"));
}

// `spattn serve` requests as a client sends them: Content-Length, chunked, gzip (an empty
// member), a bad length, a foreign Host and a slow GET.
void serve_http_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  const std::string body = "{\"prompt\": \"Once\", \"max_tokens\": 2}";
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Type: application/json\r\n";
  save(dir / "length.http",
       head + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  save(dir / "chunked.http", head + "Transfer-Encoding: chunked\r\n\r\n10\r\n" +
                                 body.substr(0, 16) + "\r\n" + "0\r\n\r\n");
  save(dir / "gzip.http",
       head + "Content-Encoding: gzip\r\nContent-Length: 20\r\n\r\n" +
           std::string("\x1f\x8b\x08\0\0\0\0\0\0\x03\x03\0\0\0\0\0\0\0\0\0", 20));
  save(dir / "bad_length.http", head + "Content-Length: -5\r\n\r\n");
  save(dir / "host.http",
       "GET /health HTTP/1.1\r\nHost: evil.example\r\nOrigin: http://x\r\n\r\n"
       "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n");
}

// Heavy-hitter traces: one head and two, sets with runs (one-byte gaps) and wide gaps.
void h2o_trace_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  H2OTraceLayer t;
  t.layer = 1, t.heads = 1, t.tokens = 40, t.chunk = 16, t.local = 4, t.heavy = 4;
  t.chunks.push_back({0, 16, {{0, 1, 7, 9, 12, 13, 14, 15}}});
  t.chunks.push_back({16, 32, {{0, 1, 9, 20, 28, 29, 30, 31}}});
  save(dir / "one_head.h2o", h2o_trace_to_bytes(t));
  t.heads = 2, t.tokens = 300, t.chunk = 128, t.local = 2, t.heavy = 200;
  t.chunks = {{0, 128, {{0, 3, 126, 127}, {5, 126, 127}}},
              {128, 256, {{0, 3, 130, 254, 255}, {254, 255}}}};
  save(dir / "two_heads.h2o", h2o_trace_to_bytes(t));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: spattn_fuzz_seeds DIR\n");
    return 2;
  }
  const fs::path root = argv[1];
  gguf_seeds(root / "gguf");
  npy_and_safetensors_seeds(root / "npy", root / "safetensors");
  calibration_seeds(root / "calibration");
  tokenizer_seeds(root / "tokenizer");
  quant_seeds(root / "quant");
  serve_seeds(root / "serve");
  serve_http_seeds(root / "serve_http");
  h2o_trace_seeds(root / "h2o_trace");
  return 0;
}
