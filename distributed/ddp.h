/*
 * DistributedDataParallel: data parallelism, as torch.nn.parallel.DistributedDataParallel.
 *
 * Every rank holds a full replica of the model and runs forward and backward on its own part
 * of the global batch. After backward the gradients are averaged over the ranks, so every
 * replica takes the same optimizer step and the replicas stay equal:
 *
 *   grad = (1/N) * sum_r grad_r      (N ranks, each with batch b: the gradient of the mean
 *                                      loss over the N*b samples, for a mean-reduced loss)
 *
 * The averaging is not one big all-reduce after backward: the gradients are packed into
 * buckets (about bucket_cap_mb each), in the reverse of registration order because backward
 * produces the last layer's gradients first, and a bucket's all-reduce starts as soon as its
 * last gradient is final — while backward still computes the earlier layers' gradients:
 *
 *   compute thread | forward | grad L3 | grad L2 | grad L1 |          | optimizer step
 *   communication                      |AR b0 |  |AR b1 |  |AR b2 |
 *                                                          ^ backward ends
 *                                                                 ^ last bucket done
 *
 *   Bucket k holds layer L(3-k)'s gradients; "communication" is the MPI group's communication
 *   thread or NCCL's stream, where the all-reduces run one after the other. Only the tail from
 *   "backward ends" to "last bucket done" is exposed communication; with one bucket, the whole
 *   all-reduce would start at "backward ends".
 *
 * Usage (one process per rank, all ranks run the same code):
 *
 *   auto group = distributed::init_process_group();
 *   auto ddp = std::make_shared<DistributedDataParallel>(model, group, DdpOptions{.bucket_cap_mb = 25});
 *   nn::AdamW opt(ddp->parameters());
 *   for (...) {
 *     Tensor loss = nn::functional::cross_entropy((*ddp)(x_local), y_local);
 *     loss.backward();      // gradients are averaged over the ranks when backward returns
 *     opt.step();
 *     opt.zero_grad();
 *   }
 *
 * When the sync finishes: in the post-accumulate hook of the parameter whose gradient
 * completes the last bucket (with every parameter used, that is inside backward, so the
 * gradients are averaged when backward() returns). With find_unused_parameters, forward()
 * walks the autograd graph of its output and counts the parameters it cannot reach as ready
 * with a zero gradient up front (torch's approach), so the last used parameter still closes
 * the sync. The next forward() (or finish_gradient_sync()) checks that the previous sync
 * completed and throws, naming the parameters that never got a gradient, when it did not.
 */
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "nn/module.h"

namespace loom::distributed {

struct DdpOptions {
  // Upper bound of a bucket's size in MiB (a parameter larger than the cap gets a bucket of its
  // own). Small buckets start communicating earlier; large ones make fewer, more efficient calls.
  double bucket_cap_mb = 25.0;
  // Parameters that get no gradient in an iteration (a branch not taken) count as zero
  // gradients. Costs a walk of the autograd graph per forward and one small all-reduce per
  // iteration (which parameters any rank used), as in torch.
  bool find_unused_parameters = false;
  // Broadcast rank 0's buffers (BatchNorm running statistics) at every forward.
  bool broadcast_buffers = true;
};

// One entry of the per-iteration timeline (last_events()): the tests check the order of
// events, and the bench measures how much of the communication backward hides.
struct DdpEvent {
  enum class Kind {
    GradReady,        // index = parameter (registration order): its gradient is final
    BucketLaunched,   // index = bucket: its all-reduce started
    BucketCompleted,  // index = bucket: its all-reduce was seen finished (polled or waited)
    SyncFinished,     // index = -1: averaged gradients are in every parameter's grad()
  };
  Kind kind;
  int64_t index;
  std::chrono::steady_clock::time_point time;
};

class DistributedDataParallel : public nn::Module {
 public:
  // Registers `module` as the child "module" (state dict keys "module.*", as torch) and
  // broadcasts rank 0's parameters and buffers so that all replicas start equal (collective:
  // every rank of `group` must construct its DDP with the same model structure).
  // Throws loom::Error for a null module or group, a parameter that is not contiguous, or
  // bucket_cap_mb <= 0.
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                          DdpOptions options = {});
  ~DistributedDataParallel() override;

  // module(input). Finishes (or reports) the previous iteration's sync first, broadcasts the
  // buffers (broadcast_buffers) and, with find_unused_parameters, marks the parameters that
  // the output does not depend on. Throws what finish_gradient_sync() throws.
  Tensor forward(const Tensor& input) override;

  // Waits for every bucket's all-reduce and writes the averages into the parameters' grad().
  // Runs automatically when the last bucket becomes ready; call it yourself only to get the
  // error below before optimizer.step(). No-op when no gradient arrived since the last sync.
  // Throws loom::Error naming the parameters that did not receive a gradient (without
  // find_unused_parameters) — after waiting for the buckets already launched, so that no
  // collective is left half-done on any rank.
  void finish_gradient_sync();

  // RAII guard: while it lives, backward only accumulates gradients locally (gradient
  // accumulation over micro-batches); the first backward after it ends averages the sum.
  //   { auto guard = ddp.no_sync(); for (micro...) loss(micro).backward(); }
  //   loss(last).backward();   // all-reduces the accumulated gradients once
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.sync_enabled_) {
      ddp_.sync_enabled_ = false;
    }
    ~NoSyncGuard() { ddp_.sync_enabled_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  nn::Module& module() { return *module_; }
  const std::shared_ptr<ProcessGroup>& process_group() const { return group_; }
  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }
  // The parameters (indices in registration order) of each bucket, in launch order.
  std::vector<std::vector<int64_t>> bucket_assignment() const;
  // The timeline of the last synced iteration (cleared when the next one starts).
  const std::vector<DdpEvent>& last_events() const { return events_; }

  std::string extra_repr() const override;

 private:
  struct Bucket {
    std::vector<int64_t> params;   // indices into params_, in bucket order
    std::vector<int64_t> offsets;  // element offset of each parameter in `flat`
    Tensor flat;                   // contiguous [numel] buffer that is all-reduced
    int64_t pending = 0;           // parameters whose gradient has not arrived this iteration
    WorkPtr work;                  // the in-flight all-reduce, if launched
  };

  void build_buckets();
  void on_grad_ready(int64_t param_index);
  void mark_ready(int64_t param_index, bool has_grad);
  void launch_ready_buckets();
  void poll_completions();
  void mark_unused_from_graph(const Tensor& output);
  void reset_iteration();
  void record(DdpEvent::Kind kind, int64_t index);
  std::string names_of(const std::vector<int64_t>& indices) const;

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  DdpOptions options_;

  std::vector<Tensor> params_;            // trainable parameters, registration order
  std::vector<std::string> param_names_;  // their dotted names (for errors)
  std::vector<int64_t> bucket_of_;        // param index -> bucket
  std::vector<int64_t> slot_of_;          // param index -> position inside its bucket
  std::vector<uint8_t> ready_;            // this iteration: gradient arrived (or counted as zero)
  std::vector<uint8_t> used_;             // this iteration: had a real gradient
  std::vector<uint64_t> hook_handles_;
  std::vector<Bucket> buckets_;

  bool sync_enabled_ = true;  // false inside no_sync()
  bool in_progress_ = false;  // some gradient arrived since the last finished sync
  int64_t next_launch_ = 0;   // buckets launch strictly in index order (same order on all ranks)
  std::vector<DdpEvent> events_;
};

}  // namespace loom::distributed
