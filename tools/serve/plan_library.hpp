// The files a request may use, by name: MMInference plans (`mminference:plan=NAME`) and
// BLASST calibrations (`blasst:sparsity=S,calib=NAME`), read once at start from the directory
// the operator names (--plans-dir) into sealed in-memory files. A request's spec never names
// a path: its plan= or calib= must be one of these names (any other is a 400 that reveals
// nothing of the machine), and no parameter value may hold a '/'. Before, `plan=/etc/shadow`
// answered with the file's first byte and `plan=/dev/zero` grew the process until it was
// killed.
#pragma once
#include <map>
#include <string>

namespace spattn::serve {

class PlanLibrary {
 public:
  PlanLibrary() = default;  // no --plans-dir: no names
  // Reads every regular file of `dir` (not its subdirectories or dot files) of at most
  // kMaxFileBytes that loads as a plan or a calibration; others are listed in skipped().
  explicit PlanLibrary(const std::string& dir);
  static constexpr size_t kMaxFileBytes = 64u << 20;

  // The spec with its plan= and calib= names replaced by the loaded files; throws a 400
  // RequestError naming spattn.attn when a name is unknown or a value holds a '/'.
  std::string resolve(const std::string& spec) const;
  size_t size() const { return plans_.size() + calibs_.size(); }
  const std::string& skipped() const { return skipped_; }

 private:
  std::map<std::string, std::string> plans_, calibs_;  // name -> /proc/self/fd/N
  std::string skipped_;
};

}  // namespace spattn::serve
