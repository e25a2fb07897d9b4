#include "runner.hpp"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/process_memory.hpp"
#include "model/kv_cache.hpp"
#include "spattn/kv_type.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"

namespace spattn::cli {

void add_runner_options(CLI::App& app, RunnerOptions& o) {
  app.add_option("-m,--model", o.model, "model file (GGUF: llama, qwen2, qwen3, phi3 or gemma3)")->required();
  app.add_option("-c,--ctx-size", o.n_ctx, "context size: KV cache capacity in tokens")
      ->capture_default_str();
  app.add_option("-b,--batch-size", o.n_batch, "logical batch size (tokens per llama_decode)")
      ->capture_default_str();
  app.add_option("--ubatch-size", o.n_ubatch, "-ub: physical batch, the prefill chunk size S")
      ->capture_default_str();
  app.add_option("--h2o-local", o.h2o_local, "chunked_h2o: local window L (tail of each chunk)")
      ->capture_default_str();
  app.add_option("--h2o-heavy", o.h2o_heavy, "chunked_h2o: heavy-hitter budget H")
      ->capture_default_str();
  app.add_option("-t,--threads", o.threads, "threads for attention and matrix products")
      ->capture_default_str();
  app.add_option("--cache-type-k", o.cache_type_k,
                 "-ctk: KV cache type for K (f32, f16, bf16, q8_0), as llama.cpp's")
      ->capture_default_str();
  app.add_option("--cache-type-v", o.cache_type_v,
                 "-ctv: KV cache type for V (f32, f16, bf16, q8_0), as llama.cpp's")
      ->capture_default_str();
  app.add_option("--attn-decode", o.attn_decode,
                 "decode attention: dense, quest[:k=PAGES,page=16..64,topp=P,sink=,local=,"
                 "dense_layers=] or blasst:lambda=X[,order=]")
      ->capture_default_str();
  app.add_flag("--json", o.json, "print one JSON object on stdout");
}

model::SessionOptions session_options(const RunnerOptions& o, const std::string& attn) {
  model::SessionOptions s;
  s.n_ctx = o.n_ctx;
  s.n_batch = o.n_batch;
  s.n_ubatch = o.n_ubatch;
  s.h2o_local = o.h2o_local;
  s.h2o_heavy = o.h2o_heavy;
  s.threads = o.threads;
  s.cache_type_k = parse_kv_type(o.cache_type_k);
  s.cache_type_v = parse_kv_type(o.cache_type_v);
  s.attn_decode = o.attn_decode;
  const MethodSpec spec = parse_method_spec(attn);
  if (spec.name == "dense" && spec.params.empty()) {
    s.mode = model::PrefillMode::dense;
  } else if (spec.name == "chunked_h2o") {
    SPATTN_CHECK(spec.params.empty(), "--attn chunked_h2o takes its sizes from -b, -ub, "
                 "--h2o-local and --h2o-heavy, not from the spec ('", attn, "')");
    s.mode = model::PrefillMode::chunked_h2o;
  } else {
    make_method(spec);  // an unknown name or bad parameter fails here, before the model loads
    s.mode = model::PrefillMode::method;
    s.attn_spec = attn;
  }
  s.validate();
  return s;
}

LoadedModel load_model_and_tokenizer(const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  auto file = std::make_shared<const gguf::File>(gguf::File::open(path));
  LoadedModel m{model::load_model(file), Tokenizer::from_gguf(*file), 0, 0, ""};
  if (file->has("tokenizer.chat_template"))
    m.chat_template = file->get_string("tokenizer.chat_template");
  std::error_code ec;
  m.file_bytes = size_t(std::filesystem::file_size(path, ec));
  SPATTN_CHECK(m.tokenizer.n_vocab() == m.model.config().n_vocab, path, ": the vocabulary has ",
               m.tokenizer.n_vocab(), " tokens but token_embd.weight ",
               m.model.config().n_vocab, " rows");
  m.load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

nlohmann::json memory_json(const LoadedModel& m,
                           std::initializer_list<const model::Session*> sessions) {
  const model::Model::Memory w = m.model.memory();
  model::Session::Memory s;
  for (const model::Session* x : sessions) {
    const model::Session::Memory a = x->memory();
    s.kv_cache += a.kv_cache;
    s.method_kv += a.method_kv;
    s.scratch += a.scratch;
    s.h2o_state += a.h2o_state;
    s.h2o_scratch += a.h2o_scratch;
    s.decode_pages += a.decode_pages;
  }
  nlohmann::json j;
  j["peak_rss_bytes"] = peak_rss_bytes();
  j["file_bytes"] = m.file_bytes;
  j["weights_mapped_bytes"] = w.mapped;
  j["weights_repacked_bytes"] = w.repacked;
  j["weights_owned_bytes"] = w.owned;
  j["kv_cache_bytes"] = s.kv_cache;
  if (sessions.size() > 0) {
    const model::KVCache& c = (*sessions.begin())->cache();
    j["kv_cache_type_k"] = kv_type_name(c.k_type());
    j["kv_cache_type_v"] = kv_type_name(c.v_type());
  }
  j["method_kv_bytes"] = s.method_kv;
  j["scratch_bytes"] = s.scratch;
  j["h2o_state_bytes"] = s.h2o_state;
  j["h2o_scratch_bytes"] = s.h2o_scratch;
  j["decode_pages_bytes"] = s.decode_pages;
  return j;
}

std::string memory_line(const LoadedModel& m,
                        std::initializer_list<const model::Session*> sessions) {
  const nlohmann::json j = memory_json(m, sessions);
  auto mib = [&](const char* k) { return double(j[k].get<size_t>()) / (1 << 20); };
  return fmt::format(
      "memory: peak RSS {:.1f} MiB (file {:.1f} MiB); weights {:.1f} MiB mapped + {:.1f} MiB "
      "repacked + {:.1f} MiB f32 norms; KV cache {:.1f} MiB (K {}, V {}); method K/V copies {:.1f} MiB; row "
      "buffers {:.1f} MiB; chunked_h2o scores and memory sets {:.1f} MiB + batch scratch {:.1f} MiB",
      mib("peak_rss_bytes"), mib("file_bytes"), mib("weights_mapped_bytes"),
      mib("weights_repacked_bytes"), mib("weights_owned_bytes"), mib("kv_cache_bytes"),
      j.contains("kv_cache_type_k") ? j["kv_cache_type_k"].get<std::string>() : "-",
      j.contains("kv_cache_type_v") ? j["kv_cache_type_v"].get<std::string>() : "-",
      mib("method_kv_bytes"), mib("scratch_bytes"), mib("h2o_state_bytes"),
      mib("h2o_scratch_bytes"));
}

std::string read_prompt(const std::string& text, const std::string& file) {
  SPATTN_CHECK(text.empty() != file.empty(), "give the prompt with -p TEXT or -f FILE (one)");
  if (!text.empty()) return text;
  std::ifstream in(file, std::ios::binary);
  SPATTN_CHECK(in.good(), "-f: cannot read '", file, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace spattn::cli
