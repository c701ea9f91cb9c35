/*
 * tools/train/trace.h: the Chrome trace writer. The file must parse as JSON, spans must nest
 * (an inner span lies within its outer one on the same thread), counters carry their value,
 * threads get distinct ids, and a Trace without a path writes nothing.
 */
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tools/train/trace.h"

namespace fs = std::filesystem;
using loom::train::Trace;
using nlohmann::json;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("loom_test_trace_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

std::vector<json> events_named(const json& doc, const std::string& name) {
  std::vector<json> out;
  for (const json& e : doc["traceEvents"])
    if (e["name"] == name) out.push_back(e);
  return out;
}

void busy_wait_us(int us) {
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < until) {
  }
}

}  // namespace

TEST_CASE("trace: nested spans are complete events that nest, with the document's fields") {
  fs::path dir = fresh_dir("nest");
  Trace trace(dir / "trace.json");
  trace.set_thread_name("main");
  {
    Trace::Scope step(trace, "step", "train");
    busy_wait_us(200);
    {
      Trace::Scope fwd(trace, "forward", "step");
      busy_wait_us(300);
    }
    trace.begin("backward", "step");
    busy_wait_us(300);
    trace.end();
  }
  trace.write();

  json doc = read_json(dir / "trace.json");
  CHECK(doc["displayTimeUnit"] == "ms");
  REQUIRE(doc["traceEvents"].is_array());
  auto step = events_named(doc, "step"), fwd = events_named(doc, "forward"), bwd = events_named(doc, "backward");
  REQUIRE(step.size() == 1);
  REQUIRE(fwd.size() == 1);
  REQUIRE(bwd.size() == 1);
  for (const json& e : {step[0], fwd[0], bwd[0]}) {
    CHECK(e["ph"] == "X");
    CHECK(e["pid"].is_number_integer());
    CHECK(e["tid"].is_number_integer());
    CHECK(e["ts"].get<double>() >= 0);
    CHECK(e["dur"].get<double>() >= 0);
  }
  CHECK(step[0]["cat"] == "train");
  CHECK(fwd[0]["cat"] == "step");
  CHECK(fwd[0]["dur"].get<double>() >= 300);
  // Nesting: the children lie inside the parent and after one another.
  double s0 = step[0]["ts"], s1 = s0 + step[0]["dur"].get<double>();
  double f0 = fwd[0]["ts"], f1 = f0 + fwd[0]["dur"].get<double>();
  double b0 = bwd[0]["ts"], b1 = b0 + bwd[0]["dur"].get<double>();
  CHECK(s0 <= f0);
  CHECK(f1 <= b0);
  CHECK(b1 <= s1);
  CHECK(step[0]["dur"].get<double>() >= 800);
  CHECK(fwd[0]["tid"] == step[0]["tid"]);
  // Metadata: the process and this thread are named.
  auto threads = events_named(doc, "thread_name");
  REQUIRE(threads.size() == 1);
  CHECK(threads[0]["ph"] == "M");
  CHECK(threads[0]["args"]["name"] == "main");
  CHECK(threads[0]["tid"] == step[0]["tid"]);
  auto procs = events_named(doc, "process_name");
  REQUIRE(procs.size() == 1);
  CHECK(procs[0]["args"]["name"] == "train");
  fs::remove_all(dir);
}

TEST_CASE("trace: counters record their value and drop non-finite ones") {
  fs::path dir = fresh_dir("counter");
  Trace trace(dir / "t.json");
  trace.counter("loss", 2.5);
  trace.counter("loss", 1.25);
  trace.counter("loss", std::nan(""));
  trace.counter("lr", 3e-4);
  trace.write();
  json doc = read_json(dir / "t.json");
  auto loss = events_named(doc, "loss");
  REQUIRE(loss.size() == 2);
  CHECK(loss[0]["ph"] == "C");
  CHECK(loss[0]["args"]["loss"].get<double>() == 2.5);
  CHECK(loss[1]["args"]["loss"].get<double>() == 1.25);
  CHECK(loss[0]["ts"].get<double>() <= loss[1]["ts"].get<double>());
  auto lr = events_named(doc, "lr");
  REQUIRE(lr.size() == 1);
  CHECK(lr[0]["args"]["lr"].get<double>() == doctest::Approx(3e-4));
  fs::remove_all(dir);
}

TEST_CASE("trace: spans from several threads get their own thread ids and all arrive") {
  fs::path dir = fresh_dir("threads");
  Trace trace(dir / "t.json");
  constexpr int kThreads = 4, kSpans = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&trace, t] {
      trace.set_thread_name("worker " + std::to_string(t));
      for (int i = 0; i < kSpans; ++i) {
        Trace::Scope outer(trace, "load", "data");
        Trace::Scope inner(trace, "decode", "data");
        trace.counter("queue", i);
      }
    });
  for (auto& th : threads) th.join();
  trace.write();
  json doc = read_json(dir / "t.json");
  auto load = events_named(doc, "load"), decode = events_named(doc, "decode");
  CHECK(load.size() == kThreads * kSpans);
  CHECK(decode.size() == kThreads * kSpans);
  CHECK(events_named(doc, "queue").size() == kThreads * kSpans);
  std::set<int> tids;
  for (const json& e : load) tids.insert(e["tid"].get<int>());
  CHECK(tids.size() == kThreads);
  // Per thread, each decode lies inside a load of the same thread (stacks are per thread).
  std::map<int, std::vector<std::pair<double, double>>> loads;
  for (const json& e : load) loads[e["tid"]].push_back({e["ts"], e["ts"].get<double>() + e["dur"].get<double>()});
  for (const json& e : decode) {
    double a = e["ts"], b = a + e["dur"].get<double>();
    bool inside = false;
    for (auto [l0, l1] : loads[e["tid"]]) inside = inside || (l0 <= a && b <= l1);
    CHECK(inside);
  }
  CHECK(events_named(doc, "thread_name").size() == kThreads);
  fs::remove_all(dir);
}

TEST_CASE("trace: without a path nothing is recorded or written, and a stray end() is an error") {
  fs::path dir = fresh_dir("noop");
  fs::current_path(dir);
  {
    Trace off;
    CHECK_FALSE(off.enabled());
    Trace::Scope s(off, "step");
    off.counter("loss", 1.0);
    off.end();  // no-op mode does not even check balance: it must cost nothing
    off.write();
    CHECK(off.event_count() == 0);
  }
  CHECK(fs::is_empty(dir));

  Trace on(dir / "t.json");
  CHECK(on.enabled());
  CHECK_THROWS_AS(on.end(), loom::Error);
  CHECK_FALSE(fs::exists(dir / "t.json"));  // nothing before write()
  on.begin("open");
  on.write();  // an open span is not written
  CHECK(events_named(read_json(dir / "t.json"), "open").empty());
  fs::current_path(fs::temp_directory_path());
  fs::remove_all(dir);
}

TEST_CASE("trace: timed spans and async slices carry their argument; ranks merge aligned at their sync point") {
  fs::path dir = fresh_dir("merge");
  using Clock = std::chrono::steady_clock;
  // Two "ranks" whose traces started 5 ms apart and synchronised at the same instant.
  Trace early(dir / "rank0.json");
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  Trace late(dir / "rank1.json");
  const Clock::time_point sync = Clock::now();
  early.mark_sync();
  late.mark_sync();
  const Clock::time_point posted = sync + std::chrono::milliseconds(1);
  for (Trace* t : {&early, &late}) {
    t->async_span("all_reduce data", "in flight", posted, posted + std::chrono::milliseconds(3), "bytes", 4096);
    t->span("all_reduce data", "communication", posted + std::chrono::milliseconds(2),
            posted + std::chrono::milliseconds(3), "bytes", 4096);
  }
  early.write_merged({early.export_events(0, "rank 0"), late.export_events(1, "rank 1")});
  json doc = read_json(dir / "rank0.json");
  std::map<std::pair<int, std::string>, json> by_rank_phase;
  std::set<std::string> processes;
  for (const json& e : doc["traceEvents"]) {
    if (e["name"] == "process_name") processes.insert(e["args"]["name"].get<std::string>());
    if (e["ph"] != "M") by_rank_phase[{e["pid"].get<int>(), e["ph"].get<std::string>()}] = e;
  }
  CHECK(processes == std::set<std::string>{"rank 0", "rank 1"});
  for (int rank : {0, 1}) {
    CAPTURE(rank);
    const json& begin = by_rank_phase.at({rank, "b"});
    const json& end = by_rank_phase.at({rank, "e"});
    const json& wait = by_rank_phase.at({rank, "X"});
    CHECK(begin["id"] == end["id"]);
    CHECK(begin["args"]["bytes"] == 4096);
    CHECK(wait["args"]["bytes"] == 4096);
    CHECK(wait["cat"] == "communication");
    CHECK(end["ts"].get<double>() - begin["ts"].get<double>() == doctest::Approx(3000).epsilon(1e-3));
    CHECK(wait["dur"].get<double>() == doctest::Approx(1000).epsilon(1e-3));
  }
  // The same instants on both ranks land on the same time, though their traces began 5 ms apart
  // (up to the microseconds between the two mark_sync calls).
  CHECK(std::abs(by_rank_phase.at({0, "b"})["ts"].get<double>() - by_rank_phase.at({1, "b"})["ts"].get<double>()) <
        500);
  CHECK(by_rank_phase.at({0, "X"})["ts"].get<double>() >= 0);
  fs::remove_all(dir);
}
