// A copy of a GGUF file with edits, for bad-input tests: keys replaced or dropped, tensors
// dropped or given other values (1-D f32 tensors). Copies the value types the model maker writes (strings,
// u32, f32, bool and arrays of strings, f32, i32).
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "spattn/gguf.hpp"

namespace spattn::test {

struct GgufEdit {
  std::set<std::string> drop_keys, drop_tensors;
  std::map<std::string, std::string> set_strings;         // key -> new string value
  std::map<std::string, uint32_t> set_u32;                // key -> new u32 value
  std::map<std::string, float> set_f32;                   // key -> new f32 value
  std::map<std::string, std::vector<float>> f32_tensors;  // name -> new 1-D f32 values
};

inline void write_edited(const gguf::File& f, const std::string& path, const GgufEdit& e) {
  using gguf::ValueType;
  gguf::Writer w;
  for (const std::string& k : f.keys()) {
    if (e.drop_keys.count(k) || k == "general.alignment") continue;
    if (auto it = e.set_strings.find(k); it != e.set_strings.end()) {
      w.set(k, it->second);
      continue;
    }
    if (auto it = e.set_u32.find(k); it != e.set_u32.end()) {
      w.set(k, it->second);
      continue;
    }
    if (auto it = e.set_f32.find(k); it != e.set_f32.end()) {
      w.set(k, it->second);
      continue;
    }
    switch (f.type_of(k)) {
      case ValueType::string: w.set(k, f.get_string(k)); break;
      case ValueType::u32: w.set(k, uint32_t(f.get_uint(k))); break;
      case ValueType::f32: w.set(k, float(f.get_float(k))); break;
      case ValueType::boolean: w.set(k, f.get_bool(k)); break;
      case ValueType::array:
        switch (f.array_type_of(k)) {
          case ValueType::string: w.set(k, f.get_string_array(k)); break;
          case ValueType::f32: w.set(k, f.get_float_array(k)); break;
          case ValueType::i32: {
            std::vector<int32_t> v;
            for (int64_t x : f.get_int_array(k)) v.push_back(int32_t(x));
            w.set(k, v);
            break;
          }
          default: ADD_FAILURE() << "gguf_edit: array type of " << k << " not copied";
        }
        break;
      default: ADD_FAILURE() << "gguf_edit: type of " << k << " not copied";
    }
  }
  for (auto& [k, v] : e.set_strings)
    if (!f.has(k)) w.set(k, v);
  for (auto& [k, v] : e.set_u32)
    if (!f.has(k)) w.set(k, v);
  for (auto& [k, v] : e.set_f32)
    if (!f.has(k)) w.set(k, v);
  std::vector<std::vector<float>> keep;  // replaced values, alive until write()
  keep.reserve(e.f32_tensors.size());
  for (const auto& t : f.tensors()) {
    if (e.drop_tensors.count(t.name)) continue;
    if (auto it = e.f32_tensors.find(t.name); it != e.f32_tensors.end()) {
      keep.push_back(it->second);
      w.add_tensor(t.name, gguf::GgmlType::f32, {int64_t(keep.back().size())}, keep.back().data());
      continue;
    }
    w.add_tensor(t.name, t.type, t.ne, t.data);
  }
  for (const auto& [name, v] : e.f32_tensors)
    if (!f.find_tensor(name)) {
      keep.push_back(v);
      w.add_tensor(name, gguf::GgmlType::f32, {int64_t(keep.back().size())}, keep.back().data());
    }
  w.write(path);
}

}  // namespace spattn::test
