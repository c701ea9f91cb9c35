/* The planner's memory, communication and bubble model (see planner.h for the formulas). */
#include "distributed/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "distributed/pipeline/pipeline.h"
#include "distributed/pipeline/schedule_simulator.h"
#include "distributed/pipeline/tensor_messages.h"

namespace loom::distributed::plan {
namespace {

constexpr double kFp32 = 4;
constexpr double kShapeHeaderBytes = (pipeline::kMaxTensorRank + 1) * 8;  // tensor_messages.h
constexpr double kLossBytes = 8;                                          // the float64 loss broadcast

double ceil_div(double a, double b) { return std::ceil(a / b); }
// Bytes one rank sends for an all-reduce of `bytes` in a group of n (process_group.h's model).
double all_reduce_sent(double bytes, int64_t n) { return 2.0 * static_cast<double>(n - 1) * bytes / static_cast<double>(n); }

void validate(const ModelSpec& model, const Layout& l) {
  LOOM_CHECK(l.dp >= 1 && l.tp >= 1 && l.pp >= 1 && l.microbatches >= 1 && l.batch >= 1,
             "plan: dp, tp, pp, microbatches and batch must be at least 1, got ", l.describe(), ", batch ", l.batch);
  LOOM_CHECK(l.zero >= 0 && l.zero <= 3, "plan: the ZeRO stages are 0 to 3, got ", l.zero);
  LOOM_CHECK(l.zero == 0 || l.dp >= 2, "plan: zero ", l.zero, " shards over the data-parallel ranks: it needs dp >= 2");
  LOOM_CHECK(l.zero != 3 || (l.tp == 1 && l.pp == 1),
             "plan: zero 3 (FullyShardedDataParallel) wraps the whole model over the data-parallel ranks; it takes "
             "no tp or pp, got ",
             l.describe());
  LOOM_CHECK(model.tensor_degree_ok(l.tp), "plan: tp ", l.tp, " does not divide the widths the split cuts in ",
             model.description);
  LOOM_CHECK(l.pp <= static_cast<int64_t>(model.units.size()), "plan: pp ", l.pp, " is more stages than the ",
             model.units.size(), " layers of ", model.description);
  LOOM_CHECK(l.batch % (l.dp * l.microbatches) == 0, "plan: batch ", l.batch, " is not divisible by dp ", l.dp,
             " x microbatches ", l.microbatches);
}

double optimizer_bytes(OptimizerKind kind, double elements, double tensors) {
  switch (kind) {
    case OptimizerKind::Adam: return 2 * kFp32 * elements + 8 * tensors;  // exp_avg, exp_avg_sq, step
    case OptimizerKind::SgdMomentum: return kFp32 * elements;
    case OptimizerKind::Sgd: return 0;
  }
  return 0;
}

struct StageUnits {
  double params = 0;            // Ψ of this rank
  double tensors = 0;           // parameter tensors
  double largest_unit = 0;      // Ψ of the largest unit (zero 3 gathers one at a time)
  double activations = 0;       // elements per sample kept for backward, without checkpointing
  double boundaries = 0;        // elements per sample of the units' outputs (what checkpointing keeps)
  double largest_activations = 0;  // one unit's, recomputed under checkpointing
  double tp_all_reduce_forward = 0, tp_all_reduce_backward = 0, tp_all_gather = 0;
};

StageUnits sum_units(const ModelSpec& model, int64_t begin, int64_t end, int64_t t) {
  StageUnits s;
  const double td = static_cast<double>(t);
  for (int64_t i = begin; i < end; ++i) {
    const PlanUnit& u = model.units[static_cast<size_t>(i)];
    const double params = ceil_div(static_cast<double>(u.params_split), td) + static_cast<double>(u.params_replicated);
    s.params += params;
    s.tensors += static_cast<double>(u.param_tensors);
    s.largest_unit = std::max(s.largest_unit, params);
    const double act = u.act_split / td + u.act_replicated;
    s.activations += act;
    s.boundaries += static_cast<double>(u.output_elements);
    s.largest_activations = std::max(s.largest_activations, act);
    s.tp_all_reduce_forward += static_cast<double>(u.tp_forward_all_reduce);
    s.tp_all_reduce_backward += static_cast<double>(u.tp_backward_all_reduce);
    s.tp_all_gather += static_cast<double>(u.tp_forward_all_gather);
  }
  return s;
}

}  // namespace

std::string Layout::describe() const {
  std::ostringstream os;
  os << "dp " << dp << " x tp " << tp << " x pp " << pp << ", zero " << zero << ", m " << microbatches;
  if (checkpointing) os << ", ckpt";
  if (amp == Amp::Bf16) os << ", bf16";
  if (amp == Amp::Fp16) os << ", fp16";
  return os.str();
}

const StagePrediction& Prediction::worst_stage() const {
  LOOM_CHECK(!stages.empty(), "plan: a prediction without stages");
  return *std::max_element(stages.begin(), stages.end(), [](const StagePrediction& a, const StagePrediction& b) {
    return a.memory.total() < b.memory.total();
  });
}

std::vector<int64_t> stage_boundaries(const ModelSpec& model, int64_t pp) {
  std::vector<double> costs;
  // A unit without parameters still costs a little, so that no stage is left with activations only.
  for (const PlanUnit& u : model.units) costs.push_back(static_cast<double>(u.params()) + 1.0);
  return pipeline::partition_balanced(costs, pp);
}

Prediction predict(const ModelSpec& model, const Layout& l, const Hardware& hardware) {
  validate(model, l);
  Prediction out;
  out.layout = l;
  const int64_t m = l.microbatches, p = l.pp, n = l.dp, t = l.tp;
  const double micro = static_cast<double>(l.batch / (l.dp * m));  // samples per micro-batch
  const double act_bytes = l.amp == Amp::None ? 4.0 : 2.0;

  // The schedule's bubble and how many micro-batches each stage holds at once.
  std::vector<int64_t> live(static_cast<size_t>(p), 1);
  if (p > 1) {
    const auto kind = l.schedule == PipelineKind::GPipe       ? pipeline::ScheduleKind::GPipe
                      : l.schedule == PipelineKind::ZeroBubbleH1 ? pipeline::ScheduleKind::ZeroBubbleH1
                                                                 : pipeline::ScheduleKind::OneFOneB;
    pipeline::SimulationResult sim = pipeline::simulate(pipeline::make_schedule(kind, p, m));
    out.bubble = sim.bubble_fraction.front();
    // The runner frees a micro-batch's graph at its W (the whole backward but for zero-bubble).
    live = sim.peak_live_until_weight_grad;
  }
  out.peak_live_microbatches = live.front();

  const std::vector<int64_t> bounds = stage_boundaries(model, p);
  const bool recompute = l.checkpointing || l.zero == 3;
  for (int64_t s = 0; s < p; ++s) {
    StagePrediction st;
    st.first_unit = bounds[static_cast<size_t>(s)];
    st.end_unit = bounds[static_cast<size_t>(s + 1)];
    StageUnits u = sum_units(model, st.first_unit, st.end_unit, t);
    const double tied = ceil_div(static_cast<double>(model.tied_split), static_cast<double>(t));
    if (p > 1 && s == p - 1 && tied > 0) {  // the last stage's copy of the tied weight
      u.params += tied;
      u.tensors += 1;
    }
    st.params = static_cast<int64_t>(u.params);
    const double shard = ceil_div(u.params, static_cast<double>(n));  // S = ceil(Ψ / N)
    MemoryBreakdown& mem = st.memory;
    CommBreakdown& comm = st.comm;

    // Parameters, gradients, optimizer state and the data-parallel traffic, by ZeRO stage.
    switch (l.zero) {
      case 0:
        mem.parameters = kFp32 * u.params;
        mem.gradients = kFp32 * u.params;
        mem.optimizer_state = optimizer_bytes(l.optimizer, u.params, u.tensors);
        if (n > 1) {
          mem.buffers += kFp32 * u.params;  // DDP's buckets (or average_gradients' flat copy)
          comm.data_parallel = all_reduce_sent(kFp32 * u.params, n);
        }
        break;
      case 1:
      case 2:
        mem.parameters = kFp32 * u.params;
        mem.gradients = kFp32 * u.params;  // as backward leaves them; stage 2 frees them in step()
        mem.optimizer_state = optimizer_bytes(l.optimizer, shard, u.tensors);
        // Kept from the last step: stage 1's averaged flat gradient, stage 2's shard gradient.
        mem.buffers += kFp32 * shard * (l.zero == 1 ? static_cast<double>(n) : 1.0);
        // step(): the new flat gradient [N·S], and in stage 2 the new shard gradient beside it (in
        // stage 1 the all-gather's input [S] comes after the old flat gradient was let go).
        mem.step_buffers = kFp32 * shard * static_cast<double>(l.zero == 1 ? n : n + 1);
        comm.data_parallel = l.zero == 1 ? all_reduce_sent(kFp32 * shard * static_cast<double>(n), n)
                                         : kFp32 * shard * static_cast<double>(n - 1);
        comm.data_parallel += kFp32 * shard * static_cast<double>(n - 1);  // all-gather of the shards
        break;
      case 3: {
        // The peak is the backward of the largest layer u: its gathered parameters [N·S_u], their
        // gradient, the reduce-scatter's [N·S_u] and [S_u], and the prefetched parameters of the
        // layer before it; of the shard gradients only those of the layers after u exist yet.
        std::vector<double> sizes;  // S_v of the units with parameters, in order
        for (int64_t i = st.first_unit; i < st.end_unit; ++i) {
          const double psi = static_cast<double>(model.units[static_cast<size_t>(i)].params());
          if (psi > 0) sizes.push_back(ceil_div(psi, static_cast<double>(n)));
        }
        const auto largest = static_cast<size_t>(std::max_element(sizes.begin(), sizes.end()) - sizes.begin());
        double shards = 0, later = 0;
        for (size_t v = 0; v < sizes.size(); ++v) {
          shards += sizes[v];
          if (v > largest) later += sizes[v];
          comm.data_parallel += 3.0 * kFp32 * sizes[v] * static_cast<double>(n - 1);
        }
        const double nd = static_cast<double>(n), su = sizes[largest];
        const double prefetched = largest > 0 ? sizes[largest - 1] * nd : 0;
        mem.parameters = kFp32 * shards;
        mem.gradients = kFp32 * later;
        mem.optimizer_state = optimizer_bytes(l.optimizer, shards, static_cast<double>(sizes.size()));
        mem.buffers += kFp32 * (3 * su * nd + su + prefetched);
        break;
      }
    }
    // Accumulating over micro-batches: a layer's gradient so far and the micro-batch's, summed.
    if (m > 1) mem.buffers += kFp32 * u.largest_unit;

    // Activations: per micro-batch in flight.
    double per_sample = l.zero == 3           ? u.boundaries
                        : l.checkpointing     ? u.boundaries + u.largest_activations
                                              : u.activations;
    if (s > 0) per_sample += static_cast<double>(model.units[static_cast<size_t>(st.first_unit - 1)].output_elements);
    mem.activations = per_sample * act_bytes * micro * static_cast<double>(live[static_cast<size_t>(s)]);

    // The batch, and the pipeline's messages kept until the step ends (pipeline.cpp's PostedSends).
    const double rank_batch = static_cast<double>(l.batch / l.dp);
    if (s == 0) mem.buffers += rank_batch * static_cast<double>(model.input_bytes_per_sample);
    if (s == p - 1) mem.buffers += rank_batch * static_cast<double>(model.target_bytes_per_sample);
    const double out_elements = static_cast<double>(model.units[static_cast<size_t>(st.end_unit - 1)].output_elements);
    const double in_elements =
        s > 0 ? static_cast<double>(model.units[static_cast<size_t>(st.first_unit - 1)].output_elements) : 0;
    if (p > 1) {
      const double md = static_cast<double>(m);
      if (s < p - 1) {
        mem.buffers += kFp32 * out_elements * micro * (md - static_cast<double>(live[static_cast<size_t>(s)]));
        comm.pipeline += md * (kFp32 * out_elements * micro + kShapeHeaderBytes);
      }
      if (s > 0) comm.pipeline += md * (kFp32 * in_elements * micro + kShapeHeaderBytes);
      // The loss goes from the last stage down a chain that ends on stage p - 2.
      if (s != p - 2) comm.pipeline += kLossBytes;
      // Every stage takes part in the tied weight's gradient sum (the middle ones add zeros).
      if (tied > 0) comm.pipeline += all_reduce_sent(kFp32 * tied, p);
    }

    // Tensor parallelism: every micro-batch's collectives (the forward ones again when
    // checkpointing recomputes the forward).
    if (t > 1) {
      const double md = static_cast<double>(m) * micro * act_bytes;
      const double forward_again = l.checkpointing ? 2.0 : 1.0;
      comm.tensor_parallel = all_reduce_sent(md * (forward_again * u.tp_all_reduce_forward + u.tp_all_reduce_backward), t) +
                             forward_again * md * u.tp_all_gather * static_cast<double>(t - 1) / static_cast<double>(t);
    }
    out.stages.push_back(st);
  }

  // Step time: the model's flops over the ranks, stretched by the bubble and the recomputation
  // (one more forward: 8 instead of 6 flops per parameter), plus the worst rank's traffic.
  double compute = model.flops_per_sample * static_cast<double>(l.batch) / static_cast<double>(l.gpus()) / hardware.flops;
  if (recompute) compute *= 8.0 / 6.0;
  double traffic = 0;
  for (const StagePrediction& st : out.stages) traffic = std::max(traffic, st.comm.total());
  out.step_seconds = compute / (1.0 - out.bubble) + traffic / hardware.bandwidth;
  return out;
}

std::vector<Prediction> rank_layouts(const ModelSpec& model, int64_t gpus, double memory_bytes, const Layout& base,
                                     const Hardware& hardware) {
  LOOM_CHECK(gpus >= 1 && memory_bytes > 0, "plan: --gpus and --memory must be positive, got ", gpus, " and ",
             memory_bytes);
  std::vector<Prediction> fits;
  for (int64_t tp = 1; tp <= gpus; ++tp) {
    if (gpus % tp != 0 || !model.tensor_degree_ok(tp)) continue;
    for (int64_t pp = 1; pp <= gpus / tp && pp <= static_cast<int64_t>(model.units.size()); ++pp) {
      if ((gpus / tp) % pp != 0) continue;
      const int64_t dp = gpus / tp / pp;
      for (int zero = 0; zero <= 3; ++zero) {
        if ((zero > 0 && dp < 2) || (zero == 3 && (tp > 1 || pp > 1))) continue;
        for (int64_t m = pp == 1 ? 1 : pp; m <= (pp == 1 ? 1 : 8 * pp); m *= 2) {
          if (base.batch % (dp * m) != 0) continue;
          for (bool ckpt : {false, true}) {
            Layout l = base;
            l.dp = dp, l.tp = tp, l.pp = pp, l.zero = zero, l.microbatches = m, l.checkpointing = ckpt;
            Prediction pred = predict(model, l, hardware);
            if (pred.worst_stage().memory.total() <= memory_bytes) fits.push_back(std::move(pred));
          }
        }
      }
    }
  }
  std::stable_sort(fits.begin(), fits.end(), [](const Prediction& a, const Prediction& b) {
    if (a.step_seconds != b.step_seconds) return a.step_seconds < b.step_seconds;
    return a.worst_stage().memory.total() < b.worst_stage().memory.total();
  });
  return fits;
}

std::string why_none_fits(const ModelSpec& model, int64_t gpus, double memory_bytes, const Layout& base,
                          const Hardware& hardware) {
  const std::vector<Prediction> any =
      rank_layouts(model, gpus, std::numeric_limits<double>::infinity(), base, hardware);
  if (any.empty())
    return "no layout of " + std::to_string(gpus) + " GPUs splits --batch " + std::to_string(base.batch) +
           " (samples per step over all GPUs): dp x micro-batches must divide it; raise --batch";
  const auto least = std::min_element(any.begin(), any.end(), [](const Prediction& a, const Prediction& b) {
    return a.worst_stage().memory.total() < b.worst_stage().memory.total();
  });
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << "the layout that needs the least memory, " << least->layout.describe()
     << ", needs "
     << least->worst_stage().memory.total() / (1024.0 * 1024.0 * 1024.0) << " GiB per GPU, over the "
     << memory_bytes / (1024.0 * 1024.0 * 1024.0) << " GiB given";
  return os.str();
}

}  // namespace loom::distributed::plan
