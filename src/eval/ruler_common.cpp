#include "eval/ruler_common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "spattn/error.hpp"

namespace spattn::eval {

const std::vector<int>& ruler_depths() {
  static const std::vector<int> d = [] {
    std::vector<int> v;
    for (int i = 0; i < 40; ++i) v.push_back(int(std::lround(100.0 * i / 39.0)));
    return v;
  }();
  return d;
}

std::string random_number(Rng& rng, int digits) {
  int64_t lo = 1;
  for (int i = 1; i < digits; ++i) lo *= 10;
  return std::to_string(rng.range(lo, lo * 10 - 1));
}

std::string random_uuid(Rng& rng) {
  uint64_t hi = rng.next(), lo = rng.next();
  hi = (hi & ~0xF000ull) | 0x4000ull;              // version 4
  lo = (lo & ~(0xC0ull << 56)) | (0x80ull << 56);  // RFC 4122 variant
  const std::string h = fmt::format("{:016x}{:016x}", hi, lo);
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) +
         "-" + h.substr(20, 12);
}

std::string random_word_key(Rng& rng) {
  const auto& a = ruler_adjectives();
  const auto& n = ruler_nouns();
  return a[size_t(rng.range(0, int64_t(a.size()) - 1))] + "-" +
         n[size_t(rng.range(0, int64_t(n.size()) - 1))];
}

std::string random_letters(Rng& rng, int k, bool upper) {
  std::string s;
  for (int i = 0; i < k; ++i) s += char((upper ? 'A' : 'a') + rng.range(0, 25));
  return s;
}

std::string pseudo_word(Rng& rng) {
  static const char kConsonants[] = "bdfgklmnprstvz", kVowels[] = "aeiou";
  std::string s;
  const int syllables = int(rng.range(2, 3));
  for (int i = 0; i < syllables; ++i) {
    s += kConsonants[rng.range(0, 13)];
    s += kVowels[rng.range(0, 4)];
  }
  return s;
}

std::vector<int64_t> sample_indices(Rng& rng, int64_t n, int64_t k) {
  std::vector<int64_t> all(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) all[size_t(i)] = i;
  // The first k steps of a Fisher-Yates shuffle.
  for (int64_t i = 0; i < k; ++i) std::swap(all[size_t(i)], all[size_t(rng.range(i, n - 1))]);
  all.resize(size_t(k));
  return all;
}

std::vector<double> draw_depths(Rng& rng, int64_t k, double depth) {
  std::vector<double> d;
  if (depth >= 0) {
    d.assign(size_t(k), depth);
  } else {
    const auto& all = ruler_depths();
    SPATTN_CHECK(k <= int64_t(all.size()), "more needles (", k, ") than RULER's depths");
    for (int64_t i : sample_indices(rng, int64_t(all.size()), k)) d.push_back(all[size_t(i)]);
  }
  std::sort(d.begin(), d.end());
  return d;
}

int64_t depth_index(int64_t n, double depth) {
  return std::min<int64_t>(n, int64_t(std::floor(double(n) * depth / 100.0)));
}

std::vector<std::string> Filler::replace(size_t removed_bytes) {
  debt_ += int64_t(removed_bytes);
  std::vector<std::string> out;
  for (;;) {
    std::string u = unit_(next_);
    if (2 * debt_ < int64_t(u.size()) || (u.empty() && debt_ <= 0)) break;
    debt_ -= int64_t(u.size()) + 1;  // and its newline
    out.push_back(std::move(u));
    ++next_;
  }
  return out;
}

std::string fill_template(std::string_view tmpl,
                          const std::vector<std::pair<std::string, std::string>>& values) {
  std::string out;
  size_t i = 0;
  while (i < tmpl.size()) {
    bool hit = false;
    if (tmpl[i] == '{') {
      for (const auto& [name, value] : values) {
        if (tmpl.compare(i + 1, name.size(), name) == 0 && i + 1 + name.size() < tmpl.size() &&
            tmpl[i + 1 + name.size()] == '}') {
          out += value;
          i += name.size() + 2;
          hit = true;
          break;
        }
      }
      if (!hit) detail::fail("template placeholder at byte ", i, " has no value");
    }
    if (!hit) out += tmpl[i++];
  }
  return out;
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

Fitted fit_haystack(const std::string& task, int64_t length, int64_t budget, int64_t lo,
                    const std::function<BuiltText(int64_t)>& build, const TokenCounter& count) {
  auto measure = [&](int64_t n, Fitted& f) {
    f.n = n;
    f.text = build(n);
    f.prompt_tokens = count(f.text.prompt);
    f.without_tokens = count(f.text.without);
    return std::max(f.prompt_tokens, f.without_tokens) <= budget;
  };
  Fitted best, probe;
  SPATTN_CHECK(measure(lo, best), task, ": length ", length, " is too short: its smallest prompt (",
               std::max(best.prompt_tokens, best.without_tokens), " tokens) and the ",
               length - budget, " tokens it generates do not fit");
  // Tokens per unit from the smallest text against an empty-ish one: the template's share is
  // counted in, so the estimate is low and the bound generous.
  const double per_unit = std::max(1e-3, double(best.prompt_tokens) / double(lo));
  int64_t lower = lo + 1,
          upper = std::max<int64_t>(int64_t(3.0 * double(budget) / per_unit), 2 * lo);
  // Grow the upper end if it still fits (a per-unit cost far above the average at lo).
  while (measure(upper, probe)) {
    SPATTN_CHECK(upper < (int64_t(1) << 32), task,
                 ": the token count does not grow with the "
                 "haystack");
    best = std::move(probe);
    lower = upper + 1;
    upper *= 2;
  }
  while (lower <= upper) {
    const int64_t mid = lower + (upper - lower) / 2;
    if (measure(mid, probe)) {
      best = std::move(probe);
      lower = mid + 1;
    } else {
      upper = mid - 1;
    }
  }
  return best;
}

RulerSample sample_from_fit(const RulerTaskInfo& t, Fitted&& f, std::vector<std::string> answers,
                            std::string reference) {
  RulerSample s;
  s.task = t.name;
  s.prompt = std::move(f.text.prompt);
  s.prompt_without = std::move(f.text.without);
  s.answers = std::move(answers);
  s.reference = std::move(reference);
  s.prompt_tokens = f.prompt_tokens;
  s.prompt_without_tokens = f.without_tokens;
  s.haystack = f.n;
  s.depths = std::move(f.text.depths);
  s.needle_offsets = std::move(f.text.needle_offsets);
  return s;
}

}  // namespace spattn::eval
