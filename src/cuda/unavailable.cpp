// spattn/cuda.hpp in a build without the CUDA backend (no CUDA compiler, or SPATTN_CUDA=off):
// every entry point says so by name. CMake compiles this file only in such builds.
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda {
namespace {
[[noreturn]] void unavailable(const char* what) {
  detail::fail("cuda ", what,
               ": this spattn was built without CUDA (configure with a CUDA "
               "compiler and SPATTN_CUDA=auto or on)");
}
}  // namespace

bool built() { return false; }
int device_count() { return 0; }
std::string device_description(int) { unavailable("device_description"); }
std::string prefill_kernel() { unavailable("prefill_kernel"); }
bool is_device_pointer(const void*) { return false; }
Tensor to_host(const TensorView&, void*) { unavailable("to_host"); }
int current_device() { unavailable("current_device"); }
void set_device(int) { unavailable("set_device"); }
DeviceGuard::DeviceGuard(int) { unavailable("DeviceGuard"); }
DeviceGuard::~DeviceGuard() = default;
void synchronize(void*) { unavailable("synchronize"); }
DeviceTensor::DeviceTensor(DType, int64_t, int64_t, int64_t) { unavailable("DeviceTensor"); }
DeviceTensor DeviceTensor::upload(const TensorView&, DType) { unavailable("DeviceTensor"); }
DeviceTensor::~DeviceTensor() = default;
DeviceTensor& DeviceTensor::operator=(DeviceTensor&& o) noexcept {
  view_ = o.view_;
  o.view_ = TensorView{};
  return *this;
}
EventTimer::EventTimer() { unavailable("EventTimer"); }
EventTimer::~EventTimer() = default;
void EventTimer::start(void*) { unavailable("EventTimer"); }
void EventTimer::stop(void*) { unavailable("EventTimer"); }
double EventTimer::ms() const { unavailable("EventTimer"); }
void attention_dense(const TensorView&, const TensorView&, const TensorView&, const TensorView&,
                     const AttnOptions&, float*, Stats*, void*) {
  unavailable("attention_dense");
}
void attention_block_sparse(const TensorView&, const TensorView&, const TensorView&,
                            const TensorView&, const BlockMask&, const AttnOptions&, float*, Stats*,
                            void*) {
  unavailable("attention_block_sparse");
}
BlockSparsePlan::BlockSparsePlan(const BlockMask&, void*) { unavailable("BlockSparsePlan"); }
BlockSparsePlan::~BlockSparsePlan() = default;
void attention_block_sparse(const TensorView&, const TensorView&, const TensorView&,
                            const TensorView&, const BlockSparsePlan&, const AttnOptions&, float*,
                            Stats*, void*) {
  unavailable("attention_block_sparse");
}
void attention_query_sparse(const TensorView&, const TensorView&, const TensorView&,
                            const std::vector<int64_t>&, const TensorView&, const AttnOptions&,
                            float*, Stats*, void*) {
  unavailable("attention_query_sparse");
}
void attention_vertical_slash(const TensorView&, const TensorView&, const TensorView&,
                              const TensorView&, const VerticalSlashIndex&, const AttnOptions&,
                              float*, Stats*, void*) {
  unavailable("attention_vertical_slash");
}
VerticalSlashIndex vertical_slash_index(const TensorView&, const TensorView&,
                                        const VerticalSlashConfig&, const AttnOptions&, void*) {
  unavailable("vertical_slash_index");
}
VerticalSlashIndex vertical_slash_estimate(const TensorView&, const TensorView&,
                                           const VerticalSlashConfig&, const AttnOptions&,
                                           const std::vector<int64_t>&, const std::vector<int64_t>*,
                                           void*) {
  unavailable("vertical_slash_estimate");
}
void attention_gathered_groups(const TensorView&, const TensorView&, const TensorView&,
                               const std::vector<GatheredGroup>&, const TensorView&,
                               const AttnOptions&, float*, Stats*, void*) {
  unavailable("attention_gathered_groups");
}
std::vector<GridLines> grid_estimate(const TensorView&, const TensorView&, const GridConfig&,
                                     const AttnOptions&, void*) {
  unavailable("grid_estimate");
}
void attention_grid(const TensorView&, const TensorView&, const TensorView&, const TensorView&,
                    const std::vector<GridLines>&, const GridConfig&, const AttnOptions&, float*,
                    Stats*, void*) {
  unavailable("attention_grid");
}
void attention_modality_pairs(const TensorView&, const TensorView&, const TensorView&,
                              const TensorView&, const std::vector<PairPlan>&, const AttnOptions&,
                              float*, Stats*, void*) {
  unavailable("attention_modality_pairs");
}
void momo_attention(const TensorView&, const TensorView&, const TensorView&, const TensorView&,
                    const MomoGpuPlan&, const AttnOptions&, float*, MomoGpuResult&, bool, void*) {
  unavailable("momo_attention");
}
void xattention_attention(const TensorView&, const TensorView&, const TensorView&,
                          const TensorView&, const XAttentionGpuPlan&, const AttnOptions&, float*,
                          BlockSelectResult&, void*) {
  unavailable("xattention_attention");
}
void mean_pool_attention(const TensorView&, const TensorView&, const TensorView&, const TensorView&,
                         const MeanPoolGpuPlan&, const AttnOptions&, float*, BlockSelectResult&,
                         void*) {
  unavailable("mean_pool_attention");
}
void flexprefill_attention(const TensorView&, const TensorView&, const TensorView&,
                           const TensorView&, const FlexPrefillGpuPlan&, const AttnOptions&, float*,
                           BlockSelectResult&, void*) {
  unavailable("flexprefill_attention");
}
void attention_blasst(const TensorView&, const TensorView&, const TensorView&, const TensorView&,
                      double, const AttnOptions&, float*, Stats*, SkipStats*, BlasstOrder, void*) {
  unavailable("attention_blasst");
}
void attention_decode(const TensorView&, const TensorView&, const TensorView&, const TensorView&,
                      const AttnOptions&, const DecodeOptions&, float*, Stats*, SkipStats*, void*) {
  unavailable("attention_decode");
}
void merge_attention(const TensorView&, const float*, const TensorView&, const float*,
                     const TensorView&, float*, void*) {
  unavailable("merge_attention");
}

}  // namespace spattn::cuda
