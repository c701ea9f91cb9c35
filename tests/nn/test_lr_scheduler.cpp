/*
 * The LR schedules against torch.optim.lr_scheduler (PyTorch 1.13): the lr of every group
 * (and OneCycleLR's momentum / beta1) after construction and after each of >= 20 steps, the
 * state dict round trip, and the errors.
 *
 * The expected sequences were printed by this Python (torch 1.13); each constant below names
 * its schedule, quantity and group:
 *
 *   import torch, math
 *   S = torch.optim.lr_scheduler
 *   def opt_sgd(lrs, momentum=0.0):
 *       return torch.optim.SGD([{'params': [torch.zeros(1, requires_grad=True)], 'lr': lr} for lr in lrs],
 *                              lr=lrs[0], momentum=momentum)
 *   def seq(opt, sched, steps, key=None):  # prints [g['lr'] (and g[key] / g['betas'][0])] per step
 *       ...; for _ in range(steps): opt.step(); sched.step(); ...
 *   o = opt_sgd([0.1, 0.02]); seq(o, S.StepLR(o, step_size=3, gamma=0.5), 25)
 *   o = opt_sgd([0.1]); seq(o, S.LinearLR(o, start_factor=0.25, end_factor=0.9, total_iters=10), 25)
 *   # CosineWithWarmup as a LambdaLR with the formula documented in lr_scheduler.h:
 *   def cos_lambda(base, W, T, min_lr, f0):
 *       def f(t):
 *           if t < W: return f0 + (1 - f0) * t / W
 *           if t > T: return min_lr / base
 *           return (min_lr + (base - min_lr) * 0.5 * (1 + math.cos(math.pi * (t - W) / (T - W)))) / base
 *       return f
 *   o = opt_sgd([0.1, 0.05]); seq(o, S.LambdaLR(o, [cos_lambda(0.1, 5, 20, 1e-3, 0.0),
 *                                                   cos_lambda(0.05, 5, 20, 1e-3, 0.0)]), 25)
 *   o = opt_sgd([0.1]); seq(o, S.LambdaLR(o, cos_lambda(0.1, 4, 24, 0.0, 0.1)), 25)
 *   o = opt_sgd([0.1], momentum=0.9); seq(o, S.OneCycleLR(o, max_lr=0.5, total_steps=25), 25, 'momentum')
 *   o = torch.optim.Adam([{'params': [torch.zeros(1, requires_grad=True)]},
 *                         {'params': [torch.zeros(1, requires_grad=True)]}], lr=1e-3)
 *   seq(o, S.OneCycleLR(o, max_lr=[0.5, 0.1], total_steps=22, pct_start=0.4, anneal_strategy='linear',
 *                       div_factor=10., final_div_factor=100., three_phase=True), 22, 'betas')
 *
 * torch's StepLR and LinearLR update the lr multiplicatively (chainable form) while Loom's use
 * the closed form, so the sequences agree to rounding: rtol 1e-12.
 */
#include <doctest/doctest.h>

#include "autograd/autograd.h"
#include "nn/optim/optim.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;
using loom::nn::Adam;
using loom::nn::LRScheduler;
using loom::nn::Optimizer;
using loom::nn::ParamGroup;
using loom::nn::SGD;

namespace {

const std::vector<double> kStepLr0 = {
    0.10000000000000001,    0.10000000000000001,    0.10000000000000001,    0.050000000000000003,
    0.050000000000000003,   0.050000000000000003,   0.025000000000000001,   0.025000000000000001,
    0.025000000000000001,   0.012500000000000001,   0.012500000000000001,   0.012500000000000001,
    0.0062500000000000003,  0.0062500000000000003,  0.0062500000000000003,  0.0031250000000000002,
    0.0031250000000000002,  0.0031250000000000002,  0.0015625000000000001,  0.0015625000000000001,
    0.0015625000000000001,  0.00078125000000000004, 0.00078125000000000004, 0.00078125000000000004,
    0.00039062500000000002, 0.00039062500000000002};
const std::vector<double> kStepLr1 = {0.02,
                                      0.02,
                                      0.02,
                                      0.01,
                                      0.01,
                                      0.01,
                                      0.0050000000000000001,
                                      0.0050000000000000001,
                                      0.0050000000000000001,
                                      0.0025000000000000001,
                                      0.0025000000000000001,
                                      0.0025000000000000001,
                                      0.00125,
                                      0.00125,
                                      0.00125,
                                      0.00062500000000000001,
                                      0.00062500000000000001,
                                      0.00062500000000000001,
                                      0.00031250000000000001,
                                      0.00031250000000000001,
                                      0.00031250000000000001,
                                      0.00015625,
                                      0.00015625,
                                      0.00015625,
                                      7.8125000000000002e-05,
                                      7.8125000000000002e-05};
const std::vector<double> kLinearLr0 = {0.025000000000000001, 0.0315,
                                        0.037999999999999999, 0.044499999999999998,
                                        0.050999999999999997, 0.057499999999999996,
                                        0.064000000000000001, 0.070500000000000007,
                                        0.077000000000000013, 0.083500000000000019,
                                        0.090000000000000024, 0.090000000000000024,
                                        0.090000000000000024, 0.090000000000000024,
                                        0.090000000000000024, 0.090000000000000024,
                                        0.090000000000000024, 0.090000000000000024,
                                        0.090000000000000024, 0.090000000000000024,
                                        0.090000000000000024, 0.090000000000000024,
                                        0.090000000000000024, 0.090000000000000024,
                                        0.090000000000000024, 0.090000000000000024};
const std::vector<double> kCosineLr0 = {0,
                                        0.020000000000000004,
                                        0.040000000000000008,
                                        0.059999999999999998,
                                        0.080000000000000016,
                                        0.10000000000000001,
                                        0.098918306236323389,
                                        0.095720500153308741,
                                        0.090546341221559898,
                                        0.083621965014763489,
                                        0.075250000000000011,
                                        0.065796341221559904,
                                        0.055674158931748853,
                                        0.045325841068251167,
                                        0.03520365877844011,
                                        0.025750000000000012,
                                        0.017378034985236535,
                                        0.010453658778440109,
                                        0.0052794998466912518,
                                        0.0020816937636766184,
                                        0.001,
                                        0.001,
                                        0.001,
                                        0.001,
                                        0.001,
                                        0.001};
const std::vector<double> kCosineLr1 = {0,
                                        0.010000000000000002,
                                        0.020000000000000004,
                                        0.029999999999999999,
                                        0.040000000000000008,
                                        0.050000000000000003,
                                        0.049464616217978243,
                                        0.047881863712243719,
                                        0.045320916362186214,
                                        0.041893699855792027,
                                        0.037750000000000006,
                                        0.033070916362186217,
                                        0.028060947350057514,
                                        0.022939052649942497,
                                        0.017929083637813793,
                                        0.013250000000000005,
                                        0.0091063001442079801,
                                        0.0056790836378137902,
                                        0.0031181362877562764,
                                        0.0015353837820217607,
                                        0.001,
                                        0.001,
                                        0.001,
                                        0.001,
                                        0.001,
                                        0.001};
const std::vector<double> kCosineF0Lr0 = {0.010000000000000002,
                                          0.032500000000000001,
                                          0.055000000000000007,
                                          0.077500000000000013,
                                          0.10000000000000001,
                                          0.099384417029756894,
                                          0.097552825814757688,
                                          0.094550326209418389,
                                          0.090450849718747381,
                                          0.085355339059327379,
                                          0.07938926261462366,
                                          0.072699524986977335,
                                          0.065450849718747373,
                                          0.057821723252011549,
                                          0.050000000000000003,
                                          0.04217827674798847,
                                          0.034549150281252633,
                                          0.027300475013022664,
                                          0.020610737385376349,
                                          0.014644660940672627,
                                          0.0095491502812526333,
                                          0.005449673790581611,
                                          0.0024471741852423235,
                                          0.00061558297024311712,
                                          0,
                                          0};
const std::vector<double> kOnecycleLr0 = {
    0.020000000000000018,   0.047490553843229644, 0.12366446078452265,  0.23107119673872251,
    0.34510517289020859,    0.43964257956106428,  0.49302603618225249,  0.49899357752451579,
    0.49099075121110264,    0.47524231600673683,  0.4522544395767425,   0.42276597118406722,
    0.38772469446604418,    0.34825686488844926,  0.30563101096814466,  0.26121716272279843,
    0.21644281777885202,    0.17274706042325755,  0.13153430825041282,  0.094129173025118487,
    0.061733886570563293,   0.035389660048327082, 0.015943218574936337, 0.0040195867799311816,
    1.9999999999999999e-06, 0.0040195867799311816};
const std::vector<double> kOnecycleMom0 = {
    0.94999999999999996, 0.94427280128266045, 0.92840323733655772, 0.90602683401276607, 0.88226975564787313,
    0.86257446259144488, 0.85145290912869742, 0.85020128530023797, 0.85180185696520727, 0.85495155660487898,
    0.85954915028125256, 0.8654468675506567,  0.87245515092739478, 0.88034874841730382, 0.88887395330218422,
    0.89775675848247416, 0.90671166329088271, 0.91545084971874735, 0.92369343312364993, 0.93117449009293662,
    0.93765357330018051, 0.94292243968009326, 0.94681174353198683, 0.94919647942993146, 0.94999999999999996,
    0.94919647942993146};
const std::vector<double> kOnecycle3Lr0 = {
    0.050000000000000003,  0.1076923076923077,     0.16538461538461538,   0.22307692307692306,
    0.28076923076923077,   0.33846153846153842,    0.39615384615384613,   0.45384615384615379,
    0.4884615384615385,    0.43076923076923079,    0.37307692307692308,   0.31538461538461543,
    0.25769230769230778,   0.20000000000000007,    0.14230769230769236,   0.084615384615384703,
    0.046333333333333351,  0.037166666666666681,   0.028000000000000008,  0.018833333333333341,
    0.0096666666666666706, 0.00050000000000000044, -0.0086666666666666767};
const std::vector<double> kOnecycle3Mom0 = {
    0.94999999999999996, 0.93717948717948718, 0.92435897435897429, 0.91153846153846152, 0.89871794871794863,
    0.88589743589743586, 0.87307692307692308, 0.8602564102564102,  0.85256410256410253, 0.86538461538461531,
    0.87820512820512819, 0.89102564102564097, 0.90384615384615374, 0.91666666666666663, 0.9294871794871794,
    0.94230769230769229, 0.94999999999999996, 0.94999999999999996, 0.94999999999999996, 0.94999999999999996,
    0.94999999999999996, 0.94999999999999996, 0.94999999999999996};
const std::vector<double> kOnecycle3Lr1 = {0.01,
                                           0.021538461538461541,
                                           0.03307692307692308,
                                           0.044615384615384619,
                                           0.056153846153846158,
                                           0.067692307692307691,
                                           0.07923076923076923,
                                           0.090769230769230769,
                                           0.097692307692307703,
                                           0.086153846153846164,
                                           0.074615384615384625,
                                           0.063076923076923086,
                                           0.051538461538461554,
                                           0.040000000000000015,
                                           0.028461538461538469,
                                           0.01692307692307693,
                                           0.0092666666666666696,
                                           0.0074333333333333352,
                                           0.0056000000000000008,
                                           0.0037666666666666673,
                                           0.0019333333333333338,
                                           9.9999999999999395e-05,
                                           -0.001733333333333335};
const std::vector<double> kOnecycle3Mom1 = {
    0.94999999999999996, 0.93717948717948718, 0.92435897435897429, 0.91153846153846152, 0.89871794871794863,
    0.88589743589743586, 0.87307692307692308, 0.8602564102564102,  0.85256410256410253, 0.86538461538461531,
    0.87820512820512819, 0.89102564102564097, 0.90384615384615374, 0.91666666666666663, 0.9294871794871794,
    0.94230769230769229, 0.94999999999999996, 0.94999999999999996, 0.94999999999999996, 0.94999999999999996,
    0.94999999999999996, 0.94999999999999996, 0.94999999999999996};

constexpr Tol kScheduleTol{1e-12, 1e-15};

// An SGD over one dummy parameter per lr.
std::unique_ptr<SGD> sgd(const std::vector<double>& lrs, double momentum = 0.0) {
  std::vector<ParamGroup> groups;
  for (double lr : lrs) groups.push_back({{zeros({1}).requires_grad_()}, {{"lr", lr}}});
  return std::make_unique<SGD>(std::move(groups), nn::SGDOptions{.lr = lrs[0], .momentum = momentum});
}

struct Sequence {
  std::vector<std::vector<double>> lr, momentum;  // [group][step]
};

// The groups' lr (and `key`) after construction and after each of `steps` steps, checking
// along the way that get_last_lr() and last_step() agree with the groups.
Sequence record(Optimizer& opt, LRScheduler& sched, int steps, const std::string& key = "") {
  const size_t groups = opt.param_groups().size();
  Sequence s{std::vector<std::vector<double>>(groups), std::vector<std::vector<double>>(groups)};
  for (int t = 0; t <= steps; ++t) {
    if (t > 0) {
      opt.step();
      sched.step();
    }
    CHECK(sched.last_step() == t);
    for (size_t g = 0; g < groups; ++g) {
      s.lr[g].push_back(opt.param_groups()[g].lr());
      CHECK(sched.get_last_lr()[g] == opt.param_groups()[g].lr());
      if (!key.empty()) s.momentum[g].push_back(opt.param_groups()[g].option(key));
    }
  }
  return s;
}

void check_sequence(const std::vector<double>& actual, const std::vector<double>& expected) {
  const std::string bad = mismatch(actual, expected, kScheduleTol);
  CHECK_MESSAGE(bad.empty(), bad);
}

}  // namespace

TEST_CASE("StepLR matches torch for 25 steps, per group") {
  auto opt = sgd({0.1, 0.02});
  nn::StepLR sched(*opt, 3, 0.5);
  Sequence s = record(*opt, sched, 25);
  check_sequence(s.lr[0], kStepLr0);
  check_sequence(s.lr[1], kStepLr1);
}

TEST_CASE("LinearLR matches torch for 25 steps, past total_iters") {
  auto opt = sgd({0.1});
  nn::LinearLR sched(*opt, 0.25, 0.9, 10);
  check_sequence(record(*opt, sched, 25).lr[0], kLinearLr0);
}

TEST_CASE("CosineWithWarmup follows its formula (torch LambdaLR) through warm-up, decay and past the end") {
  SUBCASE("from 0, to an absolute min_lr, two groups") {
    auto opt = sgd({0.1, 0.05});
    nn::CosineWithWarmup sched(*opt, 5, 20, 1e-3);
    Sequence s = record(*opt, sched, 25);
    check_sequence(s.lr[0], kCosineLr0);
    check_sequence(s.lr[1], kCosineLr1);
  }
  SUBCASE("from a start factor, to 0") {
    auto opt = sgd({0.1});
    nn::CosineWithWarmup sched(*opt, 4, 24, 0.0, 0.1);
    check_sequence(record(*opt, sched, 25).lr[0], kCosineF0Lr0);
  }
  SUBCASE("no warm-up starts at the base lr") {
    auto opt = sgd({0.1});
    nn::CosineWithWarmup sched(*opt, 0, 10);
    CHECK(sched.get_last_lr()[0] == 0.1);
    for (int i = 0; i < 10; ++i) sched.step();
    CHECK(sched.get_last_lr()[0] == 0.0);
  }
}

TEST_CASE("OneCycleLR matches torch's lr and SGD momentum for all its steps") {
  auto opt = sgd({0.1}, 0.9);
  nn::OneCycleLR sched(*opt, 0.5, 25);
  CHECK(sched.base_lrs()[0] == 0.5 / 25);
  Sequence s = record(*opt, sched, 25, "momentum");
  check_sequence(s.lr[0], kOnecycleLr0);
  check_sequence(s.momentum[0], kOnecycleMom0);
  // torch allows stepping to total_steps (the last step of a loop of total_steps iterations),
  // not beyond.
  CHECK_THROWS_WITH_AS(sched.step(),
                       doctest::Contains("tried to step 27 times; the schedule has total_steps = 25"), Error);
  CHECK(sched.last_step() == 25);
  CHECK(opt->param_groups()[0].lr() == s.lr[0].back());
}

TEST_CASE(
    "OneCycleLR with three phases, linear annealing and per-group max_lr cycles Adam's beta1 as torch") {
  std::vector<ParamGroup> groups{{{zeros({1}).requires_grad_()}}, {{zeros({1}).requires_grad_()}}};
  Adam opt(std::move(groups), {.lr = 1e-3});
  nn::OneCycleLR sched(opt, std::vector<double>{0.5, 0.1}, 22,
                       {.pct_start = 0.4,
                        .anneal_strategy = nn::OneCycleOptions::Anneal::kLinear,
                        .div_factor = 10.0,
                        .final_div_factor = 100.0,
                        .three_phase = true});
  Sequence s = record(opt, sched, 22, "beta1");
  check_sequence(s.lr[0], kOnecycle3Lr0);
  check_sequence(s.lr[1], kOnecycle3Lr1);
  check_sequence(s.momentum[0], kOnecycle3Mom0);
  check_sequence(s.momentum[1], kOnecycle3Mom1);
}

TEST_CASE("a schedule restored from its state dict continues exactly like the uninterrupted one") {
  auto reference_opt = sgd({0.1, 0.03}, 0.9);
  nn::OneCycleLR reference(*reference_opt, std::vector<double>{0.4, 0.2}, 30);
  std::vector<double> expected_lr, expected_momentum;
  for (int t = 1; t <= 30; ++t) {
    reference.step();
    if (t > 10) {
      expected_lr.push_back(reference_opt->param_groups()[1].lr());
      expected_momentum.push_back(reference_opt->param_groups()[1].option("momentum"));
    }
  }

  auto first_opt = sgd({0.1, 0.03}, 0.9);
  nn::OneCycleLR first(*first_opt, std::vector<double>{0.4, 0.2}, 30);
  for (int t = 1; t <= 10; ++t) first.step();
  const nn::StateDict saved = first.state_dict();
  CHECK(saved.at("last_step").item<int64_t>() == 10);
  CHECK(saved.at("base_lrs.1").item<double>() == 0.2 / 25);
  CHECK(saved.at("last_lr.0").item<double>() == first.get_last_lr()[0]);

  // A fresh optimizer (whose lr and momentum were not restored) and schedule: loading sets
  // the groups for step 10, and stepping on gives the uninterrupted values exactly.
  auto second_opt = sgd({0.1, 0.03}, 0.9);
  nn::OneCycleLR second(*second_opt, std::vector<double>{0.4, 0.2}, 30);
  second.load_state_dict(saved);
  CHECK(second.last_step() == 10);
  CHECK(second.get_last_lr() == first.get_last_lr());
  CHECK(second_opt->param_groups()[0].option("momentum") == first_opt->param_groups()[0].option("momentum"));
  std::vector<double> resumed_lr, resumed_momentum;
  for (int t = 11; t <= 30; ++t) {
    second.step();
    resumed_lr.push_back(second_opt->param_groups()[1].lr());
    resumed_momentum.push_back(second_opt->param_groups()[1].option("momentum"));
  }
  CHECK(resumed_lr == expected_lr);
  CHECK(resumed_momentum == expected_momentum);
}

TEST_CASE("load_state_dict rejects a schedule state of another shape and changes nothing") {
  auto opt = sgd({0.1, 0.05});
  nn::StepLR sched(*opt, 2);
  sched.step();
  const nn::StateDict good = sched.state_dict();

  auto one_group = sgd({0.1});
  nn::StepLR small(*one_group, 2);
  CHECK_THROWS_WITH_AS(small.load_state_dict(good), doctest::Contains("unexpected key 'base_lrs.1'"), Error);

  auto other = sgd({0.1, 0.05});
  nn::StepLR target(*other, 2);
  nn::StateDict missing;
  for (const auto& [k, v] : good)
    if (k != "last_lr.1") missing.insert(k, v);
  CHECK_THROWS_WITH_AS(target.load_state_dict(missing), doctest::Contains("no 'last_lr.1'"), Error);
  nn::StateDict fractional;
  for (const auto& [k, v] : good) fractional.insert(k, k == "last_step" ? scalar_tensor(1.5, kFloat64) : v);
  CHECK_THROWS_WITH_AS(target.load_state_dict(fractional), doctest::Contains("non-negative whole number"),
                       Error);
  CHECK(target.last_step() == 0);
}

TEST_CASE("schedules reject bad arguments, and a group added after construction") {
  auto opt = sgd({0.1});
  CHECK_THROWS_WITH_AS(nn::StepLR(*opt, 0), doctest::Contains("step_size must be >= 1"), Error);
  CHECK_THROWS_WITH_AS(nn::LinearLR(*opt, 0.0), doctest::Contains("start_factor must be in (0, 1]"), Error);
  CHECK_THROWS_WITH_AS(nn::LinearLR(*opt, 0.5, 1.5), doctest::Contains("end_factor must be in [0, 1]"),
                       Error);
  CHECK_THROWS_WITH_AS(nn::CosineWithWarmup(*opt, 10, 10),
                       doctest::Contains("must be larger than warmup_steps"), Error);
  CHECK_THROWS_WITH_AS(nn::CosineWithWarmup(*opt, 1, 10, -1.0), doctest::Contains("min_lr must be >= 0"),
                       Error);
  CHECK_THROWS_WITH_AS(nn::OneCycleLR(*opt, std::vector<double>{0.1, 0.2}, 10),
                       doctest::Contains("got 2 max_lr values for 1 parameter groups"), Error);
  CHECK_THROWS_WITH_AS(nn::OneCycleLR(*opt, 0.1, 10, {.pct_start = 1.5}), doctest::Contains("pct_start"),
                       Error);
  // pct_start * total_steps = 1: torch divides 0 by 0 on the first step.
  CHECK_THROWS_WITH_AS(nn::OneCycleLR(*opt, 0.1, 10, {.pct_start = 0.1}),
                       doctest::Contains("phase 0 has zero length"), Error);
  CHECK(opt->param_groups()[0].lr() == 0.1);  // failed constructions left the lr alone

  nn::StepLR sched(*opt, 2);
  opt->add_param_group({{zeros({1}).requires_grad_()}});
  CHECK_THROWS_WITH_AS(sched.step(), doctest::Contains("has 2 parameter groups but had 1"), Error);
  CHECK(sched.last_step() == 0);
}
