// What `spattn run` and `spattn perplexity` share: llama.cpp's model flags (-m, -c, -b, -ub,
// -t) and the prefill attention (--attn, --h2o-local, --h2o-heavy), loading the model and its
// tokenizer, and reading the prompt.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

#include "spattn/context_parallel.hpp"
#include "spattn/gguf.hpp"
#include "spattn/model.hpp"
#include "spattn/tokenizer.hpp"

namespace spattn::cli {

void add_run_command(CLI::App& root);
void add_perplexity_command(CLI::App& root);

struct RunnerOptions {
  std::string model;       // -m
  int64_t n_ctx = 4096;    // -c
  int64_t n_batch = 2048;  // -b
  int64_t n_ubatch = 512;  // -ub
  int64_t h2o_local = 256, h2o_heavy = 256;
  // --attn: auto (the model's own: dsa where it has a lightning indexer, else dense) | dense |
  // chunked_h2o | dsa | any library method spec
  std::string attn = model::kModelAttention;
  int threads = 2;                                         // -t
  std::string cache_type_k = "f16", cache_type_v = "f16";  // -ctk, -ctv
  // --attn-decode: auto | dense | quest[:...] | blasst:... | dsa
  std::string attn_decode = model::kModelAttention;
  bool json = false;
  int cp = 1;              // --cp P: context parallelism over P MPI ranks (mpirun -np P)
  bool cp_gather = false;  // --cp-gather: dense prefill over all-gathered K/V (one process's bits)
  bool mmap = true;        // --no-mmap: weights copied into huge pages (model::LoadOptions)
};
// `attn_default`: what --attn means when not given.
void add_runner_options(CLI::App& app, RunnerOptions& o);

// --attn as a prefill mode: "dense" and "chunked_h2o" (which takes -b, -ub, --h2o-local,
// --h2o-heavy) are the runner's own schedules; any other spec runs that library method per
// chunk. Throws Error on an unknown method or bad parameters.
model::SessionOptions session_options(const RunnerOptions& o, const std::string& attn);

// --attn and --attn-decode's "auto" as the model resolves it (model::model_attention), so that
// what a command reports is what ran.
void resolve_model_attention(RunnerOptions& o, const model::Config& cfg);

struct LoadedModel {
  model::Model model;
  Tokenizer tokenizer;
  double load_ms = 0;
  size_t file_bytes = 0;
  std::string chat_template;  // tokenizer.chat_template (Jinja source), "" when absent
};
// The model of -m as --mmap says.
LoadedModel load_model_and_tokenizer(const RunnerOptions& o);

// --cp P > 1: MPI's world of P ranks (spattn/context_parallel.hpp), else null. Throws Error on
// every rank when mpirun started another count or this build has no MPI.
std::shared_ptr<dist::Group> cp_group(const RunnerOptions& o);
// load_model_and_tokenizer, agreed over the group when there is one: a rank that cannot load
// the model makes every rank throw an Error naming it.
LoadedModel load_runner_model(const RunnerOptions& o, dist::Group* g);
// Runs body; with a group of several ranks, an error one rank met alone (the others would wait
// for it) is printed with the rank and ends every rank at once (exit 2); an error every rank
// met together (dist::agree) propagates as usual on every rank.
void with_cp(dist::Group* g, const std::function<void()>& body);
// body on every rank of g together (dist::agree, `what` naming the step) when there is a group,
// else body alone: an input one rank finds bad fails every rank with its own named error, where
// ranks failing apart would race to end each other.
void on_every_rank(dist::Group* g, const std::string& what, const std::function<void()>& body);
// Every rank's communication, time and KV cache (a collective call): rank by rank, with the
// ring's bytes per layer and the communication's share of prefill.
nlohmann::json cp_json(dist::Group& g, const LoadedModel& m, const model::Session& s);
std::string cp_line(const nlohmann::json& j);

// Peak resident memory and its parts (the model's weights, each session's KV cache, method
// copies and row buffers), as JSON and as one line for stderr.
nlohmann::json memory_json(const LoadedModel& m,
                           std::initializer_list<const model::Session*> sessions);
std::string memory_line(const LoadedModel& m,
                        std::initializer_list<const model::Session*> sessions);

// -p TEXT or -f FILE (exactly one); throws Error when neither or the file cannot be read.
std::string read_prompt(const std::string& text, const std::string& file);

}  // namespace spattn::cli
