/* Resuming a checkpoint of another layout (see resharded_resume.h). */
#include "tools/train/resharded_resume.h"

#include <optional>
#include <string>

#include "data/data.h"
#include "nn/training_state.h"
#include "tools/train/fail.h"

#if LOOM_TRAIN_WITH_MPI
#include "distributed/reshard.h"
#endif

namespace loom::train {

using nlohmann::json;

// The latest checkpoint of a job of another layout, as this rank's sections (docs/checkpoints.md,
// "Resharding"): the model and optimizer state gathered whole from every saving rank's files and
// cut to this rank's piece (distributed/reshard.h); the schedule, the loss scaler and the random
// generator of saving rank 0; its loader position moved to the batch at which as many of the
// epoch's examples were read with this job's global batch.
nn::Checkpoint resharded_checkpoint(const TrainOptions& o, nn::CheckpointManager& checkpoints, Parallelism& job,
                                    const nlohmann::json& mesh, std::ostream& out) {
#if LOOM_TRAIN_WITH_MPI
  std::optional<nn::CheckpointParts> parts = checkpoints.load_latest_parts();
  if (!parts) fail("--resume " + o.resume + ": no checkpoint there to resume from");
  const json meta = json::parse(parts->metadata, nullptr, false);
  const json saved_mesh = meta.is_object() ? meta.value("mesh", json()) : json();
  const std::string layouts = "the checkpoint " + parts->path.string() + " was written by a job of " +
                              (saved_mesh.is_null() ? std::to_string(parts->ranks()) + " ranks" : saved_mesh.dump()) +
                              ", this one is " + mesh.dump();
  try {
    const json saved = meta.is_object() ? meta.value("options", json::object()) : json::object();
    const json mine = to_json(o);
    for (const char* same : {"model", "optimizer"})
      if (saved.contains(same) && saved[same] != mine[same])
        fail("it trained --" + std::string(same) + " " + saved[same].get<std::string>() + ", this job --" + same +
             " " + mine[same].get<std::string>());
    distributed::RankTrainingState state =
        distributed::reshard_checkpoint(*parts, job.layout(), job.full_shapes());
    nn::Checkpoint resharded{.step = parts->step, .sections = parts->load_rank(0), .metadata = parts->metadata,
                       .path = parts->path, .note = parts->note};
    // Buffers (a ResNet's BatchNorm statistics) are no parameters of a layout: saving rank 0's, by
    // name (the models with buffers train whole, so the names are the same at every layout).
    for (const auto& [name, buffer] : job.local().state_dict()) {
      if (state.model.contains(name)) continue;
      const Tensor* saved_buffer = resharded.sections.at("model").find(name);
      if (!saved_buffer) fail("saving rank 0 holds no " + name + ", which this job's model has");
      state.model.insert(name, *saved_buffer);
    }
    resharded.sections["model"] = std::move(state.model);
    resharded.sections["optimizer"] = std::move(state.optimizer);
    // Batch k of the saving job's replicas together was examples [k·D·b, (k+1)·D·b) of the
    // epoch's order, which every data-parallel size shares (make_loaders).
    data::LoaderState at = data::LoaderState::from_map(nn::counters_from_state_dict(resharded.sections.at("loader")));
    const int64_t saved_global_batch = saved_mesh.value("dp", int64_t{1}) * saved.value("batch", o.batch);
    at.batch = distributed::resharded_batch(at.batch, saved_global_batch, o.dp * o.batch);
    resharded.sections["loader"] = nn::counters_to_state_dict(at.to_map());
    out << "train: " << layouts << ": resharded\n";
    return resharded;
  } catch (const Error& e) {
    fail("--resume " + o.resume + ": " + layouts + ", and it cannot be resharded: " + e.what());
  }
#else
  (void)checkpoints;
  (void)job;
  (void)mesh;
  (void)out;
  fail("--resume " + o.resume + ": the checkpoint was written by a job of another layout; this train was built "
       "without MPI, which resharding needs");
#endif
}

}  // namespace loom::train
