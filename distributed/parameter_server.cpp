/*
 * The parameter server and its workers (see parameter_server.h for the protocol and the
 * staleness rule). The server is one polling loop over per-worker state machines:
 *
 *   AwaitRequest --Pull--> send version + parameters snapshot ----------> AwaitRequest
 *   AwaitRequest --Push--> post the gradient receive --> AwaitGradient --> apply or drop --> AwaitRequest
 *   AwaitRequest --Done--> Done
 *
 * A worker's next request is received only once its previous one is handled, which is what
 * makes "push then pull" return the parameters with that push applied. With several servers a
 * worker runs this exchange with each of them, for that server's shard.
 *
 * Requests and versions go over the control group, parameters and gradients over the data group
 * (the same group on the CPU; NCCL on GPUs, see the header for why that order cannot deadlock).
 * A transfer on the data group is always posted after the request that announces it, by both
 * sides: an NCCL operation (and the emulated one, which blocks its caller) may wait until its
 * peer posts the other half, and the server posts its half only once it has read the request.
 */
#include "distributed/parameter_server.h"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

#include "core/grad_mode.h"
#include "ops/ops.h"

namespace loom::distributed {
namespace {

enum RequestKind : int64_t { kPull = 1, kPush = 2, kDone = 3 };
// Tag offsets from PsOptions::tag_base.
enum TagOffset : int { kRequestTag = 0, kGradientTag = 1, kVersionTag = 2, kParamsTag = 3 };

// The module's parameters, checked to be packable into flat buffers of one dtype and to cover
// every server with at least one tensor.
std::vector<Tensor> checked_parameters(const char* who, const PsGroups& groups, const nn::Module& module,
                                       const PsOptions& options) {
  LOOM_CHECK(groups.control && groups.data, who, ": null process group");
  const ProcessGroup& group = *groups.control;
  const ProcessGroup& data = *groups.data;
  LOOM_CHECK(group.device().is_cpu(), who,
             ": the control group must be a CPU group (MPI) that the server can poll, but ", group.describe(),
             " is on ", group.device());
  LOOM_CHECK(data.size() == group.size() && data.rank() == group.rank(), who, ": the data group (",
             data.describe(), ") must have the control group's members and ranks (", group.describe(), ")");
  LOOM_CHECK(options.num_servers >= 1 && options.num_servers < group.size(), who, ": num_servers ",
             options.num_servers, " must be in [1, ", group.size() - 1, "] so that ", group.describe(),
             " has at least one server and one worker");
  LOOM_CHECK(options.staleness >= 0, who, ": staleness bound must be >= 0, got ", options.staleness);
  std::vector<Tensor> params = module.parameters();
  LOOM_CHECK(static_cast<int64_t>(params.size()) >= options.num_servers, who, ": the module has ",
             params.size(), " parameter tensors, fewer than the ", options.num_servers,
             " servers to shard them over");
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    LOOM_CHECK(p.is_contiguous(), who, ": parameter ", i, " of shape ", p.sizes(), " is not contiguous");
    LOOM_CHECK(is_floating(p.dtype()) && p.dtype() == params[0].dtype() && p.device() == params[0].device(),
               who, ": every parameter must have one floating dtype and device; parameter 0 is ",
               params[0].dtype(), " on ", params[0].device(), ", parameter ", i, " is ", p.dtype(), " on ",
               p.device());
  }
  LOOM_CHECK(params[0].device() == data.device(), who, ": the parameters are on ", params[0].device(),
             " but the data group ", data.describe(), " sends from ", data.device());
  return params;
}

// The tensors of `params` that server `server` holds, in order.
std::vector<Tensor> shard_of(const std::vector<Tensor>& params, const std::vector<int>& owner, int server) {
  std::vector<Tensor> shard;
  for (size_t i = 0; i < params.size(); ++i)
    if (owner[i] == server) shard.push_back(params[i]);
  return shard;
}

int64_t total_numel(const std::vector<Tensor>& tensors) {
  int64_t n = 0;
  for (const Tensor& t : tensors) n += t.numel();
  return n;
}

// flat[offset_i : offset_i + numel_i] = source_i for every tensor, in order (undefined -> zeros).
void pack(const std::vector<Tensor>& tensors, const std::vector<Tensor>& shapes_from, const Tensor& flat) {
  NoGradGuard no_grad;  // copying parameters is not part of any model's computation
  int64_t offset = 0;
  for (size_t i = 0; i < shapes_from.size(); ++i) {
    const int64_t n = shapes_from[i].numel();
    Tensor slot = flat.narrow(0, offset, n).view(shapes_from[i].sizes());
    if (tensors[i].defined())
      slot.copy_(tensors[i]);
    else
      slot.zero_();
    offset += n;
  }
}

std::string pending_workers(const std::vector<int>& ranks) {
  std::ostringstream os;
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? "," : "") << ranks[i];
  return os.str();
}

}  // namespace

std::vector<int> assign_shards(const std::vector<Tensor>& params, int num_servers) {
  LOOM_CHECK(num_servers >= 1 && static_cast<int64_t>(params.size()) >= num_servers,
             "assign_shards: ", params.size(), " parameter tensors cannot be spread over ", num_servers,
             " servers");
  // Largest first (ties: the earlier tensor), each to the least loaded server: the classic
  // greedy for balanced partitions, which also gives every server a tensor (the first
  // num_servers tensors go to distinct, still empty servers).
  std::vector<size_t> order(params.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params[a].numel() > params[b].numel(); });
  std::vector<int64_t> load(static_cast<size_t>(num_servers), 0);
  std::vector<int> owner(params.size(), 0);
  for (size_t i : order) {
    const auto lightest = std::min_element(load.begin(), load.end()) - load.begin();
    owner[i] = static_cast<int>(lightest);
    // An empty tensor still counts one, so that it, too, goes to a server with nothing yet.
    load[static_cast<size_t>(lightest)] += std::max<int64_t>(params[i].numel(), 1);
  }
  return owner;
}

// ---- server --------------------------------------------------------------------------------

struct ParameterServer::Peer {
  enum class State { AwaitRequest, AwaitGradient, Done };
  int rank = 0;
  State state = State::AwaitRequest;
  Tensor request;   // int64 [2]: {kind, version}
  Tensor gradient;  // flat [P], this worker's own receive buffer
  WorkPtr pending;  // the receive this peer's state waits on
  int64_t computed_on = 0;
};

ParameterServer::ParameterServer(PsGroups groups, std::shared_ptr<nn::Module> module,
                                 const OptimizerFactory& make_optimizer, PsOptions options)
    : group_(std::move(groups.control)),
      data_(std::move(groups.data)),
      module_(std::move(module)),
      options_(options) {
  LOOM_CHECK(module_, "ParameterServer: null module");
  const std::vector<Tensor> all =
      checked_parameters("ParameterServer", PsGroups(group_, data_), *module_, options_);
  LOOM_CHECK(group_->rank() < options_.num_servers, "ParameterServer: constructed on rank ", group_->rank(),
             ", but only ranks below num_servers = ", options_.num_servers, " serve (", group_->describe(),
             ")");
  params_ = shard_of(all, assign_shards(all, options_.num_servers), group_->rank());
  numel_ = total_numel(params_);
  optimizer_ = make_optimizer(params_);
  LOOM_CHECK(optimizer_ != nullptr, "ParameterServer: the optimizer factory returned null");
  stats_.staleness_histogram.assign(static_cast<size_t>(options_.staleness) + 1, 0);
  stats_.applied_per_rank.assign(static_cast<size_t>(group_->size()), 0);
  stats_.dropped_per_rank.assign(static_cast<size_t>(group_->size()), 0);
}

// Applies or refuses the gradient a worker computed on the parameters of version `computed_on`.
// staleness = updates the server applied since that version; the bound keeps it <= S.
void ParameterServer::apply_gradient(Peer& peer, int64_t computed_on) {
  const int64_t staleness = version_ - computed_on;
  ++stats_.pushes;
  if (staleness > options_.staleness) {
    ++stats_.dropped;
    ++stats_.dropped_per_rank[static_cast<size_t>(peer.rank)];
    return;
  }
  // The parameters' gradients become views of the peer's receive buffer: no copy, and the
  // buffer is not reused before the next push of this peer, long after step() returned.
  int64_t offset = 0;
  for (Tensor& p : params_) {
    p.mutable_grad() = peer.gradient.narrow(0, offset, p.numel()).view(p.sizes());
    offset += p.numel();
  }
  optimizer_->step();
  optimizer_->zero_grad();  // drop the views: the next gradient is another peer's buffer
  ++version_;
  ++stats_.applied;
  ++stats_.applied_per_rank[static_cast<size_t>(peer.rank)];
  ++stats_.staleness_histogram[static_cast<size_t>(staleness)];
  stats_.max_applied_staleness = std::max(stats_.max_applied_staleness, staleness);
}

PsStats ParameterServer::run() {
  const int base = options_.tag_base;
  const auto flat_options = params_[0].options();
  std::vector<Peer> peers;
  for (int r = options_.num_servers; r < group_->size(); ++r) {
    Peer peer;
    peer.rank = r;
    peer.request = zeros({2}, kInt64);
    peer.gradient = empty({numel_}, flat_options);
    // Posted up front, one per worker: whichever worker speaks first is served first.
    peer.pending = group_->recv_async(peer.request, r, base + kRequestTag);
    peers.push_back(std::move(peer));
  }
  // Replies in flight, with the snapshot buffers they send from (kept alive until completed,
  // and never written again: the next update writes the master parameters, not a snapshot).
  struct Reply {
    WorkPtr version_sent, params_sent;
    Tensor version, params;
  };
  std::vector<Reply> replies;

  size_t active = peers.size();
  auto last_progress = std::chrono::steady_clock::now();
  while (active > 0) {
    bool progressed = false;
    for (Peer& peer : peers) {
      if (peer.state == Peer::State::Done || !peer.pending->is_completed()) continue;
      // is_completed() said the receive finished: wait() returns at once, and raises the
      // receive's error, if it failed.
      peer.pending->wait();
      progressed = true;
      if (peer.state == Peer::State::AwaitGradient) {
        apply_gradient(peer, peer.computed_on);
        peer.state = Peer::State::AwaitRequest;
        peer.pending = group_->recv_async(peer.request, peer.rank, base + kRequestTag);
        continue;
      }
      const int64_t kind = peer.request.data_ptr<int64_t>()[0];
      const int64_t version = peer.request.data_ptr<int64_t>()[1];
      if (kind == kPull) {
        Reply reply;
        reply.version = full({1}, version_, kInt64);
        reply.params = empty({numel_}, flat_options);
        pack(params_, params_, reply.params);
        reply.version_sent = group_->send_async(reply.version, peer.rank, base + kVersionTag);
        reply.params_sent = data_->send_async(reply.params, peer.rank, base + kParamsTag);
        replies.push_back(std::move(reply));
        ++stats_.pulls;
        peer.pending = group_->recv_async(peer.request, peer.rank, base + kRequestTag);
      } else if (kind == kPush) {
        LOOM_CHECK(version >= 0 && version <= version_, "ParameterServer: worker ", peer.rank,
                   " pushed a gradient computed on version ", version, " but the server is at version ",
                   version_);
        peer.computed_on = version;
        peer.state = Peer::State::AwaitGradient;
        // The worker sends the gradient right after the request; receive it into this peer's
        // own buffer, then apply it when this receive completes (a later turn of the loop).
        peer.pending = data_->recv_async(peer.gradient, peer.rank, base + kGradientTag);
      } else if (kind == kDone) {
        peer.state = Peer::State::Done;
        --active;
      } else {
        LOOM_FAIL("ParameterServer: worker ", peer.rank, " sent request kind ", kind, " (expected ",
                  int64_t{kPull}, " pull, ", int64_t{kPush}, " push or ", int64_t{kDone}, " done); ",
                  group_->describe());
      }
    }
    // Forget the replies that have left (the worker received them).
    std::erase_if(replies,
                  [](Reply& r) { return r.version_sent->is_completed() && r.params_sent->is_completed(); });

    const auto now = std::chrono::steady_clock::now();
    if (progressed) {
      last_progress = now;
    } else {
      if (now - last_progress > group_->timeout()) {
        std::vector<int> waiting;
        for (const Peer& peer : peers)
          if (peer.state != Peer::State::Done) waiting.push_back(peer.rank);
        LOOM_FAIL("ParameterServer: no message from workers ", pending_workers(waiting), " within ",
                  group_->timeout().count(), " ms (", group_->describe(), ", version ", version_, ")");
      }
      // Nothing arrived: let the workers (possibly on the same cores) run instead of spinning.
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  // Every worker is done, so every reply was received (each worker waits for its pull's reply
  // before it can send "done"); these waits return at once and surface any send error.
  for (Reply& reply : replies) {
    reply.version_sent->wait();
    reply.params_sent->wait();
  }
  return stats_;
}

// ---- worker --------------------------------------------------------------------------------

Worker::Worker(PsGroups groups, std::shared_ptr<nn::Module> module, PsOptions options)
    : group_(std::move(groups.control)),
      data_(std::move(groups.data)),
      module_(std::move(module)),
      options_(options) {
  LOOM_CHECK(module_, "Worker: null module");
  const std::vector<Tensor> all = checked_parameters("Worker", PsGroups(group_, data_), *module_, options_);
  LOOM_CHECK(group_->rank() >= options_.num_servers, "Worker: rank ", group_->rank(),
             " is a server rank (num_servers = ", options_.num_servers, ", ", group_->describe(), ")");
  const std::vector<int> owner = assign_shards(all, options_.num_servers);
  const auto flat_options = all[0].options();
  for (int server = 0; server < options_.num_servers; ++server) {
    Shard shard;
    shard.server = server;
    shard.params = shard_of(all, owner, server);
    const int64_t numel = total_numel(shard.params);
    shard.request = zeros({2}, kInt64);
    shard.gradient = empty({numel}, flat_options);
    shard.reply_version = zeros({1}, kInt64);
    shard.reply_params = empty({numel}, flat_options);
    shards_.push_back(std::move(shard));
  }
}

Worker::~Worker() {
  if (finished_) return;
  try {
    finish();
  } catch (const std::exception&) {
    // Already unwinding from (or after) a failure; the servers report their own timeout.
  }
}

std::vector<int64_t> Worker::versions() const {
  std::vector<int64_t> v;
  for (const Shard& shard : shards_) v.push_back(shard.version);
  return v;
}

// Waits until the previous requests and gradients left this rank, so that their buffers can be
// rewritten. Each server receives them in order, so this waits at most for it to reach them.
void Worker::wait_sends() {
  for (WorkPtr& work : sends_) work->wait();
  sends_.clear();
}

void Worker::send_request(Shard& shard, int64_t kind, int64_t version) {
  shard.request.data_ptr<int64_t>()[0] = kind;
  shard.request.data_ptr<int64_t>()[1] = version;
  sends_.push_back(group_->send_async(shard.request, shard.server, options_.tag_base + kRequestTag));
}

void Worker::pull() {
  LOOM_CHECK(!finished_, "Worker::pull: called after finish() on rank ", group_->rank());
  wait_sends();
  const int base = options_.tag_base;
  // All servers are asked at once and answer in parallel. The parameters' receives follow the
  // requests, in server order (the header says why both orders matter on NCCL).
  std::vector<WorkPtr> received;
  for (Shard& shard : shards_)
    received.push_back(group_->recv_async(shard.reply_version, shard.server, base + kVersionTag));
  for (Shard& shard : shards_) send_request(shard, kPull, 0);
  for (Shard& shard : shards_)
    received.push_back(data_->recv_async(shard.reply_params, shard.server, base + kParamsTag));
  // Waits for every server's reply: each handles our earlier push first, so these are the
  // parameters with it applied (or refused). Times out with the group's timeout.
  for (WorkPtr& work : received) work->wait();
  NoGradGuard no_grad;  // overwriting the leaves' values is not part of the model's graph
  for (Shard& shard : shards_) {
    int64_t offset = 0;
    for (Tensor& p : shard.params) {
      p.detach().copy_(shard.reply_params.narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
    shard.version = shard.reply_version.data_ptr<int64_t>()[0];
  }
  ++pulls_;
}

void Worker::push() {
  LOOM_CHECK(!finished_, "Worker::push: called after finish() on rank ", group_->rank());
  LOOM_CHECK(pulls_ > 0, "Worker::push: no pull() yet on rank ", group_->rank(),
             ": a gradient must be computed on parameters pulled from the servers");
  wait_sends();  // the gradient and request buffers are about to be rewritten
  for (Shard& shard : shards_) {
    std::vector<Tensor> grads;
    grads.reserve(shard.params.size());
    for (const Tensor& p : shard.params) grads.push_back(p.grad());
    pack(grads, shard.params, shard.gradient);
    send_request(shard, kPush, shard.version);
  }
  // After every request, in server order: see pull().
  for (Shard& shard : shards_)
    sends_.push_back(data_->send_async(shard.gradient, shard.server, options_.tag_base + kGradientTag));
  ++pushes_;
}

void Worker::finish() {
  if (finished_) return;
  finished_ = true;
  wait_sends();
  for (Shard& shard : shards_) send_request(shard, kDone, shard.version);
  // The last messages must leave before the group may be torn down.
  wait_sends();
}

// ---- driver --------------------------------------------------------------------------------

PsStats train_async(PsGroups groups, std::shared_ptr<nn::Module> module,
                    const OptimizerFactory& make_optimizer,
                    const std::function<bool(nn::Module& module, int64_t step)>& step, PsOptions options) {
  LOOM_CHECK(groups.control != nullptr, "train_async: null group");
  if (groups.control->rank() < options.num_servers)
    return ParameterServer(std::move(groups), std::move(module), make_optimizer, options).run();

  Worker worker(std::move(groups), module, options);
  std::vector<Tensor> params = module->parameters();
  for (int64_t i = 0;; ++i) {
    worker.pull();
    for (Tensor& p : params) p.mutable_grad() = Tensor();  // each push carries one step's gradient
    if (!step(*module, i)) break;
    worker.push();
  }
  worker.finish();
  PsStats stats;
  stats.pulls = worker.pulls();
  stats.pushes = worker.pushes();
  return stats;
}

}  // namespace loom::distributed
