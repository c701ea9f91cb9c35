/* DistributedDataParallel: bucketed gradient all-reduce overlapped with backward (see ddp.h). */
#include "distributed/ddp.h"

#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "autograd/accumulate_grad.h"
#include "autograd/node.h"
#include "core/grad_mode.h"
#include "ops/ops.h"

namespace loom::distributed {

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> group, DdpOptions options)
    : module_(std::move(module)), group_(std::move(group)), options_(options) {
  LOOM_CHECK(module_ != nullptr, "DistributedDataParallel: null module");
  LOOM_CHECK(group_ != nullptr, "DistributedDataParallel: null process group");
  LOOM_CHECK(options_.bucket_cap_mb > 0, "DistributedDataParallel: bucket_cap_mb must be > 0, got ",
             options_.bucket_cap_mb);
  register_module("module", module_);

  for (auto& [name, p] : module_->named_parameters()) {
    LOOM_CHECK(p.is_contiguous(), "DistributedDataParallel: parameter '", name, "' (shape ", p.sizes(),
               ") is not contiguous; collectives need contiguous tensors");
    if (!p.requires_grad()) continue;  // frozen parameters are neither synced nor bucketed
    params_.push_back(p);
    param_names_.push_back(name);
  }

  // Start from rank 0's weights. Collective: every rank broadcasts the same tensors in the
  // same order (registration order), and each broadcast waits until rank 0's values arrived,
  // because the first forward must not read a half-written parameter.
  {
    NoGradGuard no_grad;
    for (const Tensor& p : module_->parameters()) group_->broadcast(p, 0);
    for (const Tensor& b : module_->buffers()) {
      LOOM_CHECK(b.is_contiguous(), "DistributedDataParallel: a buffer of shape ", b.sizes(),
                 " is not contiguous");
      group_->broadcast(b, 0);
    }
  }

  build_buckets();
  ready_.assign(params_.size(), 0);
  used_.assign(params_.size(), 0);

  // The hook holds `this` raw: the DDP object removes its hooks in the destructor, so a hook
  // never outlives it.
  for (size_t i = 0; i < params_.size(); ++i) {
    hook_handles_.push_back(params_[i].register_post_accumulate_grad_hook(
        [this, i](const Tensor&) { on_grad_ready(static_cast<int64_t>(i)); }));
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (size_t i = 0; i < params_.size(); ++i) params_[i].remove_hook(hook_handles_[i]);
  // An in-flight all-reduce writes into our buckets: wait for it before they are freed. Errors
  // cannot leave a destructor; a failed collective was or will be reported by the backend.
  for (Bucket& bucket : buckets_) {
    if (!bucket.work) continue;
    try {
      bucket.work->wait();
    } catch (...) {
    }
  }
}

// Buckets: parameters in reverse registration order (backward reaches the last layer first),
// cut when the next parameter would exceed the cap or has another dtype/device (a bucket is
// one flat tensor). Every rank builds the same buckets from the same model, which is what
// makes the bucket all-reduces match up across ranks.
void DistributedDataParallel::build_buckets() {
  const double cap_bytes = options_.bucket_cap_mb * 1024.0 * 1024.0;
  bucket_of_.assign(params_.size(), -1);
  slot_of_.assign(params_.size(), -1);
  std::vector<std::vector<int64_t>> groups;
  double bytes = 0;
  for (int64_t i = static_cast<int64_t>(params_.size()) - 1; i >= 0; --i) {
    const Tensor& p = params_[static_cast<size_t>(i)];
    bool new_bucket = groups.empty();
    if (!new_bucket) {
      const Tensor& first = params_[static_cast<size_t>(groups.back().front())];
      new_bucket = first.dtype() != p.dtype() || first.device() != p.device() ||
                   bytes + static_cast<double>(p.nbytes()) > cap_bytes;
    }
    if (new_bucket) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(i);
    bytes += static_cast<double>(p.nbytes());
  }
  for (auto& members : groups) {
    Bucket bucket;
    int64_t numel = 0;
    for (int64_t i : members) {
      bucket_of_[static_cast<size_t>(i)] = static_cast<int64_t>(buckets_.size());
      slot_of_[static_cast<size_t>(i)] = static_cast<int64_t>(bucket.params.size());
      bucket.params.push_back(i);
      bucket.offsets.push_back(numel);
      numel += params_[static_cast<size_t>(i)].numel();
    }
    const Tensor& first = params_[static_cast<size_t>(members.front())];
    bucket.flat = zeros({numel}, first.options());
    bucket.pending = static_cast<int64_t>(members.size());
    buckets_.push_back(std::move(bucket));
  }
}

std::vector<std::vector<int64_t>> DistributedDataParallel::bucket_assignment() const {
  std::vector<std::vector<int64_t>> out;
  for (const Bucket& b : buckets_) out.push_back(b.params);
  return out;
}

std::string DistributedDataParallel::extra_repr() const {
  std::ostringstream os;
  os << "world_size=" << group_->size() << ", buckets=" << buckets_.size()
     << ", bucket_cap_mb=" << options_.bucket_cap_mb
     << ", find_unused_parameters=" << (options_.find_unused_parameters ? "true" : "false");
  return os.str();
}

void DistributedDataParallel::record(DdpEvent::Kind kind, int64_t index) {
  events_.push_back({kind, index, std::chrono::steady_clock::now()});
}

std::string DistributedDataParallel::names_of(const std::vector<int64_t>& indices) const {
  std::ostringstream os;
  for (size_t k = 0; k < indices.size(); ++k)
    os << (k ? ", " : "") << "'" << param_names_[static_cast<size_t>(indices[k])] << "'";
  return os.str();
}

void DistributedDataParallel::reset_iteration() {
  for (Bucket& b : buckets_) {
    b.pending = static_cast<int64_t>(b.params.size());
    b.work.reset();
  }
  std::fill(ready_.begin(), ready_.end(), 0);
  std::fill(used_.begin(), used_.end(), 0);
  next_launch_ = 0;
  in_progress_ = false;
}

// ---- the hook path (runs inside backward) -------------------------------------------------------

void DistributedDataParallel::on_grad_ready(int64_t param_index) {
  if (!sync_enabled_) return;  // no_sync(): the gradient just accumulates locally
  mark_ready(param_index, true);
}

void DistributedDataParallel::mark_ready(int64_t param_index, bool has_grad) {
  const auto i = static_cast<size_t>(param_index);
  if (!in_progress_) {
    events_.clear();
    in_progress_ = true;
  }
  LOOM_CHECK(!ready_[i], "DistributedDataParallel: parameter '", param_names_[i], "' ",
             used_[i] ? "received a gradient twice in one iteration"
                      : "received a gradient although forward found it unreachable from the output",
             " (rank ", group_->rank(), "); call forward before every backward");
  ready_[i] = 1;
  used_[i] = has_grad ? 1 : 0;
  if (has_grad) record(DdpEvent::Kind::GradReady, param_index);

  // Copy the gradient into its slot of the bucket (a missing gradient counts as zero).
  Bucket& bucket = buckets_[static_cast<size_t>(bucket_of_[i])];
  const Tensor& p = params_[i];
  Tensor slot = bucket.flat.narrow(0, bucket.offsets[static_cast<size_t>(slot_of_[i])], p.numel());
  {
    NoGradGuard no_grad;
    if (has_grad)
      slot.copy_(p.grad().reshape({-1}));
    else
      slot.zero_();
  }
  --bucket.pending;
  launch_ready_buckets();
  poll_completions();

  // The last bucket is launched: every gradient of this iteration has arrived, so backward has
  // no more parameter gradients to compute and the sync can finish right here.
  if (next_launch_ == static_cast<int64_t>(buckets_.size())) finish_gradient_sync();
}

// Launches complete buckets in index order. A bucket that is complete before an earlier one
// waits for it: every rank must issue the all-reduces in the same order (MPI matches
// collectives by order), and hook order could differ between ranks in principle.
void DistributedDataParallel::launch_ready_buckets() {
  while (next_launch_ < static_cast<int64_t>(buckets_.size()) &&
         buckets_[static_cast<size_t>(next_launch_)].pending == 0) {
    Bucket& bucket = buckets_[static_cast<size_t>(next_launch_)];
    // Asynchronous: the all-reduce proceeds while backward computes the next gradients.
    // Avg divides the sum by the group size, so grad = (1/N) sum_r grad_r.
    record(DdpEvent::Kind::BucketLaunched, next_launch_);
    bucket.work = group_->all_reduce_async(bucket.flat, ReduceOp::Avg);
    ++next_launch_;
  }
}

// A non-blocking test of the in-flight all-reduces, to record when each finished (the timeline
// of last_events()). It does not drive the communication: the backends progress on their own
// (the MPI group's communication thread, NCCL's stream).
void DistributedDataParallel::poll_completions() {
  for (int64_t b = 0; b < next_launch_; ++b) {
    Bucket& bucket = buckets_[static_cast<size_t>(b)];
    if (bucket.work && bucket.work->is_completed()) {
      bucket.work->wait();  // completed: returns at once, and throws if the operation failed
      bucket.work.reset();
      record(DdpEvent::Kind::BucketCompleted, b);
    }
  }
}

// ---- finishing -----------------------------------------------------------------------------

void DistributedDataParallel::finish_gradient_sync() {
  if (!in_progress_) return;

  if (next_launch_ < static_cast<int64_t>(buckets_.size())) {
    std::vector<int64_t> missing;
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_[i]) missing.push_back(static_cast<int64_t>(i));
    // Wait for the buckets already launched: every rank launched the same ones (same model,
    // same graph), and leaving them in flight would pair them with the next iteration's
    // collectives. Their results are dropped; the gradients stay local.
    for (int64_t b = 0; b < next_launch_; ++b)
      if (auto& work = buckets_[static_cast<size_t>(b)].work) work->wait();
    reset_iteration();
    // With find_unused_parameters forward counts the unreachable parameters, so a gap means a
    // backward that did not follow a forward through this DDP (called the inner module?).
    LOOM_FAIL("DistributedDataParallel (", group_->describe(), "): parameters ", names_of(missing),
              " did not receive a gradient in this iteration; the gradients were not synchronised. ",
              options_.find_unused_parameters
                  ? "Every backward must follow a forward through the DistributedDataParallel module "
                    "(find_unused_parameters is on: forward counts the unused ones)"
                  : "If the model does not use every parameter in every forward, pass "
                    "find_unused_parameters = true (DdpOptions)");
  }

  // Wait for every bucket's all-reduce: the averaged values must be in the bucket before they
  // are copied into grad(), and the optimizer step that follows must see them.
  for (int64_t b = 0; b < static_cast<int64_t>(buckets_.size()); ++b) {
    Bucket& bucket = buckets_[static_cast<size_t>(b)];
    if (!bucket.work) continue;  // seen completed by poll_completions
    bucket.work->wait();
    bucket.work.reset();
    record(DdpEvent::Kind::BucketCompleted, b);
  }

  // With find_unused_parameters: which parameters did *any* rank use? A parameter no rank
  // used keeps its grad() as it is (undefined after zero_grad), so the optimizer skips it as
  // it would without DDP; one that some rank used gets the average with zeros for the others.
  // Blocking all-reduce (Max of 0/1 flags): every rank needs the answer before writing grads.
  std::vector<uint8_t> global_used(params_.size(), 1);
  if (options_.find_unused_parameters) {
    std::vector<float> flags(used_.begin(), used_.end());
    // On the parameters' device: the NCCL backend reduces CUDA tensors only.
    Tensor flag_tensor = tensor(flags).to(params_.front().device());
    group_->all_reduce(flag_tensor, ReduceOp::Max);
    std::vector<float> reduced = flag_tensor.to_vector<float>();
    for (size_t i = 0; i < params_.size(); ++i) global_used[i] = reduced[i] > 0.5f ? 1 : 0;
  }

  {
    NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!global_used[i]) continue;
      Bucket& bucket = buckets_[static_cast<size_t>(bucket_of_[i])];
      Tensor& p = params_[i];
      Tensor averaged =
          bucket.flat.narrow(0, bucket.offsets[static_cast<size_t>(slot_of_[i])], p.numel()).view(p.sizes());
      Tensor& grad = p.mutable_grad();
      if (grad.defined())
        grad.copy_(averaged);
      else
        grad = averaged.clone();  // the bucket is reused next iteration: grad() must own its data
    }
  }
  record(DdpEvent::Kind::SyncFinished, -1);
  reset_iteration();
}

// ---- forward -------------------------------------------------------------------------------

// Every AccumulateGrad node reachable from the output's grad_fn is a parameter backward will
// reach; the others get no gradient this iteration and are counted as zero now, so that their
// buckets do not wait for them (torch's find_unused_parameters does the same walk).
void DistributedDataParallel::mark_unused_from_graph(const Tensor& output) {
  std::unordered_set<const TensorImpl*> reached;
  std::unordered_set<const autograd::Node*> seen;
  std::vector<std::shared_ptr<autograd::Node>> stack;
  if (auto fn = output.grad_fn()) stack.push_back(fn);
  while (!stack.empty()) {
    std::shared_ptr<autograd::Node> node = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(node.get()).second) continue;
    if (auto* acc = dynamic_cast<const autograd::AccumulateGrad*>(node.get()))
      reached.insert(acc->leaf().impl());
    for (const autograd::Edge& edge : node->next_edges())
      if (edge.valid()) stack.push_back(edge.node);
  }
  // The output itself may be a parameter (an identity model): then it is its own leaf.
  if (output.is_leaf()) reached.insert(output.impl());
  for (size_t i = 0; i < params_.size(); ++i)
    if (!reached.count(params_[i].impl())) mark_ready(static_cast<int64_t>(i), false);
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  // The previous iteration must be complete before this one starts; with every parameter used
  // this is a no-op (the sync finished inside backward), otherwise it reports what is missing.
  finish_gradient_sync();

  if (options_.broadcast_buffers) {
    // Blocking broadcasts from rank 0: this forward must see rank 0's running statistics, and
    // every rank broadcasts the same buffers in the same order.
    NoGradGuard no_grad;
    for (const Tensor& b : module_->buffers()) group_->broadcast(b, 0);
  }

  Tensor output = module_->forward(input);
  if (options_.find_unused_parameters && sync_enabled_ && output.requires_grad())
    mark_unused_from_graph(output);
  return output;
}

}  // namespace loom::distributed
