#include "model/model_stage.h"

#include "model/multiscreen.h"
#include "model/transformer.h"

namespace multiscreen {

template <typename Real>
std::unique_ptr<ModelStage<Real>> MakeModelStage(const ModelDims& dims, const ShardSpec& shard, ModelOptions options,
                                                 Communicator* tp) {
  if (dims.transformer()) return std::make_unique<Transformer<Real>>(dims, shard, options, tp);
  return std::make_unique<Multiscreen<Real>>(dims, shard, options, tp);
}

template std::unique_ptr<ModelStage<float>> MakeModelStage<float>(const ModelDims&, const ShardSpec&, ModelOptions,
                                                                   Communicator*);
template std::unique_ptr<ModelStage<double>> MakeModelStage<double>(const ModelDims&, const ShardSpec&, ModelOptions,
                                                                    Communicator*);

}  // namespace multiscreen
