/*
 * Asynchronous data-parallel training with a parameter server: the strategy of TensorFlow's
 * ParameterServerStrategy (and of DistBelief's "Downpour SGD"), written over the process group's
 * tagged point-to-point messages.
 *
 *            rank 0: ParameterServer                   ranks 1..N-1: Worker
 *        +--------------------------------+        +-----------------------------+
 *        | master parameters, version v   | <----- | pull(): parameters, version |
 *        | optimizer (SGD, Adam, ...)     | -----> |   forward, backward on its  |
 *        | applies each gradient as soon  | <----- | push(): gradient @ version  |
 *        | as it arrives, v <- v + 1      |        | finish(): "done"            |
 *        +--------------------------------+        +-----------------------------+
 *
 * There is no barrier: the server serves whichever worker is ready (it polls every posted
 * receive with Work::is_completed), so a slow worker never holds up a fast one. The price is
 * staleness: a worker computes its gradient on the parameters of version v, and by the time the
 * gradient arrives the server may have applied k other gradients, so it lands on version v + k.
 * k is the gradient's staleness. Synchronous data parallel (DDP) has k = 0 always, and pays for
 * it with a barrier per step (every step runs at the pace of the slowest rank).
 *
 * Staleness bound S (PsOptions::staleness): the server REFUSES a gradient whose staleness
 * exceeds S: the gradient is dropped, not applied, and counted in PsStats::dropped. The worker is
 * not told; its next pull brings it up to date. (The alternative, delaying fast workers until the
 * slow ones catch up, as Stale Synchronous Parallel does, wastes no gradient but brings waiting
 * back; it is not implemented.) Every applied
 * gradient therefore has staleness <= S, and with S = 0 and one worker the run is exactly
 * synchronous SGD.
 *
 * Wire protocol, per worker w and server (tags offset by PsOptions::tag_base; P = the number of
 * parameter elements the server holds; "control" and "data" are the groups of PsGroups, one and
 * the same group unless NCCL carries the data):
 *   w -> server  kRequest  int64 [2]  control: {kind, version}: kind Pull, Push or Done; version =
 *                                     the parameters' version the pushed gradient was computed on
 *   w -> server  kGradient flat [P]   data, after a Push request: the gradient of each of the
 *                                     server's parameters, in parameters() order (zeros for none)
 *   server -> w  kVersion  int64 [1]  control, reply to a Pull: the version of the parameters
 *   server -> w  kParams   flat [P]   data, reply to a Pull: the server's parameters, concatenated
 * MPI keeps the order of messages between two ranks with the same tag, and the server handles a
 * worker's next request only after it finished the previous one, so a Pull sent right after a
 * Push sees the parameters with that Push applied (or refused).
 *
 * Usage (the step function computes the gradients into the worker's module):
 *
 *   auto stats = distributed::train_async(group, model,
 *       [&](std::vector<Tensor> p) { return std::make_unique<nn::SGD>(p, nn::SGDOptions{.lr = 0.1}); },
 *       [&](nn::Module& m, int64_t step) {   // on workers; false when this worker's data ends
 *         if (step == steps) return false;
 *         nn::functional::cross_entropy(m(x[step]), y[step]).backward();
 *         return true;
 *       }, {.staleness = 4});
 *
 * or the classes directly: ParameterServer(...).run() on rank 0; on the workers
 * Worker w(...); loop { w.pull(); <zero grads, forward, backward>; w.push(); } w.finish().
 *
 * Sharding (PsOptions::num_servers = K): ranks 0..K-1 are servers, each holding a shard of the
 * parameters, by whole tensors (assign_shards: largest tensor first to the least loaded server),
 * with its own optimizer and its own version counter; ranks K..N-1 are workers. A worker pulls
 * from and pushes to every server, so one server's link carries 1/K of the traffic. Each server
 * applies or refuses its part of a gradient on its own (as TensorFlow's parameter servers update
 * each variable independently); since the optimizers update every tensor on its own, K servers
 * with staleness 0 and one worker still compute exactly synchronous SGD.
 *
 * All parameters must be contiguous and of one floating dtype, on the device the data group sends
 * from (CPU for MPI, CUDA for NCCL).
 *
 * On GPUs (PsGroups{control, data}): the requests and versions stay on a CPU group (MPI), the
 * parameters and gradients go over NCCL on CUDA tensors. The server must serve whichever worker
 * is ready, and NCCL cannot wait for that: it has no tags, no receive from any source, and a
 * posted receive holds up every later operation on its stream until its sender arrives. So the
 * server polls tagged MPI requests, as on the CPU, and only then posts the NCCL transfer, which
 * the worker has posted (or is about to post) on its side:
 *
 *      worker w                         server s
 *      MPI  request {Push, v}  -------> polled; post NCCL recv(gradient, w)
 *      NCCL send(gradient, s)  =======> (completes; apply or drop)
 *      MPI  request {Pull}     -------> polled; MPI send(version), NCCL send(parameters, w)
 *      NCCL recv(parameters, s) <======
 *
 * Why this cannot deadlock: NCCL matches a pair's transfers in issue order, and each side issues
 * them in the order of the requests; a worker issues its transfers with several servers in server
 * order, and sends a pull's requests only after its push's transfers completed. A server's
 * transfer can then be held up only by its worker finishing a transfer with a lower-numbered
 * server, so no cycle of waits can form.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "distributed/process_group.h"
#include "nn/module.h"
#include "nn/optim/optimizer.h"

namespace loom::distributed {

struct PsOptions {
  // S: the largest staleness (server updates between a worker's pull and its push) of a gradient
  // the server applies; older gradients are dropped. Read by the server only.
  int64_t staleness = 4;
  // Ranks 0 .. num_servers-1 serve a shard each; every other rank is a worker. num_servers and
  // tag_base must be the same on every rank.
  int num_servers = 1;
  // First of the four tags the protocol uses (tag_base .. tag_base + 3): keep them clear of the
  // tags other code sends on the same group.
  int tag_base = 0x5053;  // "PS"
};

// What a server did (for its shard), for the staleness / throughput trade-off.
struct PsStats {
  int64_t pulls = 0;    // parameter requests served (on a worker: its own pulls)
  int64_t pushes = 0;   // gradients received, applied + dropped (on a worker: its own pushes)
  int64_t applied = 0;  // gradients applied (= the final version)
  int64_t dropped = 0;  // gradients refused as staler than PsOptions::staleness
  int64_t max_applied_staleness = 0;
  // staleness_histogram[k]: applied gradients of staleness k (k = 0 .. staleness).
  std::vector<int64_t> staleness_histogram;
  // Per group rank: gradients applied / dropped from that worker (0 for the servers).
  std::vector<int64_t> applied_per_rank, dropped_per_rank;
};

// The groups the protocol's messages travel on; the same members and ranks in both. `control`
// carries the small requests and versions, which the server polls in whatever order they come:
// a CPU group (MPI). `data` carries the parameters and gradients, from the device of the
// module's parameters: the same MPI group on the CPU, or NCCL on CUDA tensors (made from
// `control` by make_nccl_group). One group converts to PsGroups that use it for both.
struct PsGroups {
  PsGroups(std::shared_ptr<ProcessGroup> both)
      : control(both), data(std::move(both)) {}  // NOLINT: implicit on purpose
  PsGroups(std::shared_ptr<ProcessGroup> control_group, std::shared_ptr<ProcessGroup> data_group)
      : control(std::move(control_group)), data(std::move(data_group)) {}
  std::shared_ptr<ProcessGroup> control, data;
};

// Makes a server's optimizer over its shard of the master parameters (in parameters() order).
using OptimizerFactory = std::function<std::unique_ptr<nn::Optimizer>(std::vector<Tensor> params)>;

// For each of `params` (in order), the server 0 .. num_servers-1 that holds it: whole tensors,
// the largest first, each to the server holding the fewest elements so far (ties: the lowest
// rank), so that the shards are about equal. A pure function: the same on every rank. Throws if
// there are fewer tensors than servers.
std::vector<int> assign_shards(const std::vector<Tensor>& params, int num_servers);

// The server side. `module` holds the master parameters (its current values are version 0); a
// server uses only the tensors of its shard.
class ParameterServer {
 public:
  // Throws loom::Error if this rank is not a server (rank >= options.num_servers), there is no
  // worker (num_servers >= group size), staleness < 0, the parameters are not contiguous, of one
  // floating dtype, on the data group's device, or there are fewer parameter tensors than
  // servers; or the two groups differ in size or rank, or the control group is not on the CPU.
  ParameterServer(PsGroups groups, std::shared_ptr<nn::Module> module, const OptimizerFactory& make_optimizer,
                  PsOptions options = {});

  // Serves pulls and pushes from every worker, in whatever order they come, until every worker
  // sent "done". Throws loom::Error when no message arrives within the group's timeout (naming
  // the workers still running), or when a request is malformed.
  PsStats run();

  int64_t version() const { return version_; }
  const PsStats& stats() const { return stats_; }
  nn::Optimizer& optimizer() { return *optimizer_; }

 private:
  struct Peer;
  void apply_gradient(Peer& peer, int64_t computed_on);

  std::shared_ptr<ProcessGroup> group_;  // control: requests and versions
  std::shared_ptr<ProcessGroup> data_;   // parameters and gradients
  std::shared_ptr<nn::Module> module_;
  std::vector<Tensor> params_;
  std::unique_ptr<nn::Optimizer> optimizer_;
  PsOptions options_;
  int64_t numel_ = 0;
  int64_t version_ = 0;
  PsStats stats_;
};

// The worker side. `module` has the servers' architecture; pull() overwrites its parameters.
class Worker {
 public:
  // Throws loom::Error as ParameterServer's constructor (for a rank that is a server).
  Worker(PsGroups groups, std::shared_ptr<nn::Module> module, PsOptions options = {});
  // Sends "done" if finish() was not called (errors ignored: a destructor cannot throw).
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Copies every server's current shard into the module. Blocks until all servers answered
  // (each answers after the requests this worker sent it earlier).
  void pull();
  // Sends the module's gradients (zeros for parameters without one), computed on the parameters
  // of the last pull(), each shard to its server. Asynchronous: returns once the messages are
  // handed to the backend. Throws if pull() was never called.
  void push();
  // Tells every server this worker is done and waits until its messages left. Idempotent.
  void finish();

  // versions()[s]: the version of server s's shard at the last pull (-1 before the first).
  std::vector<int64_t> versions() const;
  int64_t pulls() const { return pulls_; }
  int64_t pushes() const { return pushes_; }

 private:
  // What this worker exchanges with one server.
  struct Shard {
    int server = 0;
    std::vector<Tensor> params;  // this shard's tensors of the module, in parameters() order
    int64_t version = -1;
    Tensor request, gradient, reply_version, reply_params;
  };
  void send_request(Shard& shard, int64_t kind, int64_t version);
  void wait_sends();

  std::shared_ptr<ProcessGroup> group_;  // control: requests and versions
  std::shared_ptr<ProcessGroup> data_;   // parameters and gradients
  std::shared_ptr<nn::Module> module_;
  PsOptions options_;
  std::vector<Shard> shards_;
  int64_t pulls_ = 0, pushes_ = 0;
  bool finished_ = false;
  // Sends in flight: the shards' request and gradient buffers stay untouched until they complete.
  std::vector<WorkPtr> sends_;
};

// The whole loop: ranks below options.num_servers run a server over `module` and return its stats;
// every other rank runs a Worker: pull, zero the gradients, step(module, step) (which computes
// them, and returns false when this worker has no more data: nothing is pushed then), push,
// and finally finish(). On a worker the module ends with the parameters of its last pull, and the
// stats returned hold only its own `pulls` and `pushes`.
// When `step` throws on a worker, the Worker's destructor still sends "done" before the exception
// leaves, so the server and the other workers finish instead of waiting for it.
PsStats train_async(PsGroups groups, std::shared_ptr<nn::Module> module,
                    const OptimizerFactory& make_optimizer,
                    const std::function<bool(nn::Module& module, int64_t step)>& step,
                    PsOptions options = {});

}  // namespace loom::distributed
