#include "runner.hpp"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/process_memory.hpp"
#include "model/kv_cache.hpp"
#include "spattn/arch.hpp"
#include "spattn/kv_type.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"

namespace spattn::cli {

void add_runner_options(CLI::App& app, RunnerOptions& o) {
  // The architectures from the traits table (spattn/arch.hpp), so the help never lags it.
  app.add_option("-m,--model", o.model,
                 "model file (GGUF: " +
                     model::arch_names([](const model::ArchTraits&) { return true; }, ", ") + ")")
      ->required();
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
                 "decode attention: auto (the model's own: dsa for deepseek32, else dense), dense, "
                 "quest[:k=PAGES,page=16..64,topp=P,sink=,local=,dense_layers=,dense_at=F], "
                 "blasst:lambda=X[,order=], blasst:sparsity=S,calib=FILE or dsa")
      ->capture_default_str();
  app.add_flag("--json", o.json, "print one JSON object on stdout");
  app.add_flag("--mmap,!--no-mmap", o.mmap,
               "read the weights from the mapped file, as llama.cpp does (default); --no-mmap: "
               "those ggml does not repack are copied into transparent huge pages, where the "
               "system offers them (no periodic stalls of decode on 4 KiB pages; a slower load)");
  app.add_option("--cp", o.cp,
                 "context parallelism: run as one of P ranks under mpirun -np P (prefill over "
                 "zigzag chunks: dense in position order, one process's bits; a_shape or "
                 "blasst:lambda=X by a pass-KV ring; chunked_h2o by its memory set passed from "
                 "rank to rank; dsa over each layer's gathered K/V and indexer keys, one "
                 "process's bits; decode merged over the ranks)")
      ->capture_default_str();
  app.add_flag("--cp-gather", o.cp_gather,
               "with --cp, dense prefill: all-gather each layer's K/V and run the one-process "
               "kernel (the same bits as one process, as the default; the layer's whole K/V on "
               "every rank)");
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
  s.cp_gather = o.cp_gather;
  // An unknown name or a bad parameter fails here, before the model loads.
  s.attn = attn;
  s.validate();
  return s;
}

void resolve_model_attention(RunnerOptions& o, const model::Config& cfg) {
  o.attn = model::model_attention(o.attn, cfg);
  o.attn_decode = model::model_attention(o.attn_decode, cfg);
}

LoadedModel load_model_and_tokenizer(const RunnerOptions& o) {
  const std::string& path = o.model;
  const auto t0 = std::chrono::steady_clock::now();
  auto file = std::make_shared<const gguf::File>(gguf::File::open(path));
  model::LoadOptions load;
  load.mmap = o.mmap;
  LoadedModel m{model::load_model(file, load), Tokenizer::from_gguf(*file), 0, 0, ""};
  if (file->has("tokenizer.chat_template"))
    m.chat_template = file->get_string("tokenizer.chat_template");
  std::error_code ec;
  m.file_bytes = size_t(std::filesystem::file_size(path, ec));
  SPATTN_CHECK(m.tokenizer.n_vocab() == m.model.config().n_vocab, path, ": the vocabulary has ",
               m.tokenizer.n_vocab(), " tokens but token_embd.weight ", m.model.config().n_vocab,
               " rows");
  m.load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

std::shared_ptr<dist::Group> cp_group(const RunnerOptions& o) {
  SPATTN_CHECK(o.cp >= 1, "--cp must be >= 1, got ", o.cp);
  SPATTN_CHECK(!o.cp_gather || o.cp > 1, "--cp-gather needs --cp P with P > 1");
  if (o.cp == 1) return nullptr;
  return dist::mpi_world(o.cp);
}

LoadedModel load_runner_model(const RunnerOptions& o, dist::Group* g) {
  if (!g) return load_model_and_tokenizer(o);
  std::optional<LoadedModel> m;
  dist::agree(*g, "loading the model", [&] { m.emplace(load_model_and_tokenizer(o)); });
  // Every rank must hold the same model: compare the shapes and the vocabulary.
  const model::Config& c = m->model.config();
  const int64_t shape[] = {int64_t(c.arch), c.n_layer,       c.n_embd,  c.n_head,
                           c.n_head_kv,     c.head_dim,      c.n_ff,    c.n_vocab,
                           c.n_expert,      c.n_expert_used, c.n_ff_exp};
  const uint64_t mine = dist::fingerprint(shape, sizeof shape);
  std::vector<uint64_t> all(size_t(g->size()));
  g->allgather(&mine, sizeof mine, all.data());
  dist::agree(*g, "loading the model", [&] {
    for (int r = 1; r < g->size(); ++r)
      SPATTN_CHECK(all[size_t(r)] == all[0], "rank ", r,
                   " loaded a model of another shape "
                   "than rank 0's");
  });
  return std::move(*m);
}

void with_cp(dist::Group* g, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    if (g && g->size() > 1 && !g->failed_together()) {
      fmt::print(stderr, "error: rank {} of {} (alone; ending every rank): {}\n", g->rank(),
                 g->size(), e.what());
      std::fflush(stderr);
      g->abort(2);
    }
    throw;
  }
}

void on_every_rank(dist::Group* g, const std::string& what, const std::function<void()>& body) {
  if (g)
    dist::agree(*g, what, body);
  else
    body();
}

nlohmann::json cp_json(dist::Group& g, const LoadedModel& m, const model::Session& s) {
  const model::Timings& t = s.timings();
  // One fixed record per rank.
  struct Rank {
    double prefill_ms, prefill_attn_ms, prefill_comm_ms, ring_comm_ms, decode_ms, decode_comm_ms;
    int64_t prefill_sent, prefill_recv, ring_sent, ring_layers, logits_recv, decode_sent,
        decode_recv, kv_bytes, kv_tokens, peak_rss, seed_recv, tiles_visited, tiles_skipped;
  };
  const Rank mine{t.prefill_ms,
                  t.prefill_attn_ms,
                  t.prefill_comm.comm_ms,
                  t.prefill_comm.ring_comm_ms,
                  t.decode_ms,
                  t.decode_comm.comm_ms,
                  t.prefill_comm.bytes_sent,
                  t.prefill_comm.bytes_recv,
                  t.prefill_comm.ring_bytes_sent,
                  t.prefill_comm.ring_layers,
                  t.prefill_comm.logits_bytes_recv,
                  t.decode_comm.bytes_sent,
                  t.decode_comm.bytes_recv,
                  int64_t(s.memory().kv_cache),
                  s.cache().size(),
                  int64_t(peak_rss_bytes()),
                  t.prefill_comm.blasst_seed_bytes_recv,
                  t.prefill_stats.tiles_visited,
                  t.prefill_stats.tiles_skipped};
  std::vector<Rank> all(size_t(g.size()));
  g.allgather(&mine, sizeof mine, all.data());
  nlohmann::json j;
  j["ranks"] = g.size();
  j["n_layer"] = m.model.config().n_layer;
  // Key tiles of the prefill over every rank (BLASST: how many its rule skipped).
  int64_t visited = 0, skipped = 0;
  for (const Rank& r : all) visited += r.tiles_visited, skipped += r.tiles_skipped;
  j["prefill_tiles_visited"] = visited;
  j["prefill_tiles_skipped"] = skipped;
  j["prefill_skipped_fraction"] = visited > 0 ? double(skipped) / double(visited) : 0.0;
  for (const Rank& r : all) {
    const double per_layer = r.ring_layers > 0 ? double(r.ring_sent) / double(r.ring_layers) : 0.0;
    j["per_rank"].push_back(
        {{"prefill_ms", r.prefill_ms},
         {"prefill_attn_ms", r.prefill_attn_ms},
         {"prefill_comm_ms", r.prefill_comm_ms},
         {"prefill_comm_share", r.prefill_ms > 0 ? r.prefill_comm_ms / r.prefill_ms : 0.0},
         {"ring_comm_ms", r.ring_comm_ms},
         {"ring_comm_share", r.prefill_ms > 0 ? r.ring_comm_ms / r.prefill_ms : 0.0},
         {"prefill_bytes_sent", r.prefill_sent},
         {"prefill_bytes_recv", r.prefill_recv},
         {"ring_bytes_sent", r.ring_sent},
         {"ring_layer_passes", r.ring_layers},
         {"ring_bytes_per_layer", per_layer},
         {"logits_bytes_recv", r.logits_recv},
         {"blasst_seed_bytes_recv", r.seed_recv},
         {"prefill_tiles_visited", r.tiles_visited},
         {"prefill_tiles_skipped", r.tiles_skipped},
         {"decode_ms", r.decode_ms},
         {"decode_comm_ms", r.decode_comm_ms},
         {"decode_bytes_sent", r.decode_sent},
         {"decode_bytes_recv", r.decode_recv},
         {"kv_cache_bytes", r.kv_bytes},
         {"kv_tokens", r.kv_tokens},
         {"peak_rss_bytes", r.peak_rss}});
  }
  return j;
}

std::string cp_line(const nlohmann::json& j) {
  std::string s = fmt::format("context parallel: {} ranks", j["ranks"].get<int>());
  int r = 0;
  for (const auto& x : j["per_rank"])
    s += fmt::format(
        "\n  rank {}: prefill {:.1f} ms, communication {:.1f} ms ({:.1f}%; the ring's {:.1f} ms), "
        "ring {:.1f} KiB per layer, KV cache {:.2f} MiB ({} tokens), decode communication {:.1f} ms",
        r++, x["prefill_ms"].get<double>(), x["prefill_comm_ms"].get<double>(),
        100 * x["prefill_comm_share"].get<double>(), x["ring_comm_ms"].get<double>(),
        x["ring_bytes_per_layer"].get<double>() / 1024,
        double(x["kv_cache_bytes"].get<int64_t>()) / (1 << 20), x["kv_tokens"].get<int64_t>(),
        x["decode_comm_ms"].get<double>());
  return s;
}

nlohmann::json memory_json(const LoadedModel& m,
                           std::initializer_list<const model::Session*> sessions) {
  const model::Model::Memory w = m.model.memory();
  model::Session::Memory s;
  for (const model::Session* x : sessions) {
    const model::Session::Memory a = x->memory();
    s.kv_cache_per_token += a.kv_cache_per_token;
    s.kv_cache += a.kv_cache;
    s.method_kv += a.method_kv;
    s.scratch += a.scratch;
    s.h2o_state += a.h2o_state;
    s.h2o_scratch += a.h2o_scratch;
    s.decode_pages += a.decode_pages;
    s.indexer_keys += a.indexer_keys;
    s.cp_ring += a.cp_ring;
    s.attention_staging += a.attention_staging;
  }
  nlohmann::json j;
  j["peak_rss_bytes"] = peak_rss_bytes();
  j["file_bytes"] = m.file_bytes;
  j["weights_mapped_bytes"] = w.mapped;
  j["weights_repacked_bytes"] = w.repacked;
  j["weights_owned_bytes"] = w.owned;
  j["kv_cache_bytes"] = s.kv_cache;
  // The cache's bytes a token takes over every layer (its K and V as stored, in every session
  // given), and the heads they hold: the latent attention's cache keeps one kv head of
  // kv_lora_rank + rope values a layer (docs/runner.md, "Memory").
  j["kv_cache_bytes_per_token"] = s.kv_cache_per_token;
  if (sessions.size() > 0) {
    const model::Session& x = **sessions.begin();
    const model::KVCache& c = x.cache();
    j["kv_cache_type_k"] = kv_type_name(c.k_type());
    j["kv_cache_type_v"] = kv_type_name(c.v_type());
    j["kv_cache_tokens"] = c.capacity();
    j["kv_cache_layout"] = x.attention_shape().latent ? "latent" : "heads";
    j["kv_cache_heads"] = c.kv_heads();
    j["kv_cache_head_dim"] = c.dim();
  }
  j["method_kv_bytes"] = s.method_kv;
  j["scratch_bytes"] = s.scratch;
  j["h2o_state_bytes"] = s.h2o_state;
  j["h2o_scratch_bytes"] = s.h2o_scratch;
  // Transient: the largest copy of a layer's cache one attention call made (dsa prefill's
  // widened tiles and token-major keys), freed when the call returns; in the peak RSS, not held.
  j["attention_staging_bytes"] = s.attention_staging;
  j["decode_pages_bytes"] = s.decode_pages;
  // DSA (deepseek32, glm-dsa): the indexer's key per token and layer, held beside the cache.
  j["indexer_keys_bytes"] = s.indexer_keys;
  j["cp_ring_bytes"] = s.cp_ring;  // --cp: the ring's shard buffers
  return j;
}

std::string memory_line(const LoadedModel& m,
                        std::initializer_list<const model::Session*> sessions) {
  const nlohmann::json j = memory_json(m, sessions);
  auto mib = [&](const char* k) { return double(j[k].get<size_t>()) / (1 << 20); };
  return fmt::format(
      "memory: peak RSS {:.1f} MiB (file {:.1f} MiB); weights {:.1f} MiB mapped + {:.1f} MiB "
      "repacked + {:.1f} MiB f32 norms; KV cache {:.1f} MiB (K {}, V {}); method K/V copies {:.1f} MiB; row "
      "buffers {:.1f} MiB; chunked_h2o scores and memory sets {:.1f} MiB + batch scratch {:.1f} MiB; "
      "DSA indexer keys {:.1f} MiB; attention's largest staged cache copy {:.1f} MiB (freed after its "
      "call)",
      mib("peak_rss_bytes"), mib("file_bytes"), mib("weights_mapped_bytes"),
      mib("weights_repacked_bytes"), mib("weights_owned_bytes"), mib("kv_cache_bytes"),
      j.contains("kv_cache_type_k") ? j["kv_cache_type_k"].get<std::string>() : "-",
      j.contains("kv_cache_type_v") ? j["kv_cache_type_v"].get<std::string>() : "-",
      mib("method_kv_bytes"), mib("scratch_bytes"), mib("h2o_state_bytes"),
      mib("h2o_scratch_bytes"), mib("indexer_keys_bytes"), mib("attention_staging_bytes"));
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
