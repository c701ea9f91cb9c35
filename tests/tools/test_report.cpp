/*
 * tools/train/report.h: report.html from a run directory. Synthetic config.json and
 * metrics.jsonl go in; the page must be HTML with one SVG polyline per series holding one
 * point per finite value, escaped configuration values, nice tick values, and errors that
 * name the file and line when the inputs are missing or malformed.
 */
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "core/error.h"
#include "tools/train/report.h"

namespace fs = std::filesystem;
using namespace loom::train;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("loom_test_report_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// The number of x,y pairs in the polyline of series `name`; -1 if there is none, -2 if several.
int polyline_points(const std::string& html, const std::string& name) {
  const std::string key = "data-series=\"" + name + "\"";
  size_t p = html.find(key);
  if (p == std::string::npos) return -1;
  if (html.find(key, p + 1) != std::string::npos) return -2;
  size_t a = html.find("points=\"", p) + 8, b = html.find('"', a);
  std::string pts = html.substr(a, b - a);
  return static_cast<int>(count(pts, ",")) == static_cast<int>(count(pts, " ")) + 1
             ? static_cast<int>(count(pts, ",")) : -3;
}

// The numbers printed as tick labels of one kind ("xtick"/"ytick"), chart by chart.
std::vector<std::vector<double>> tick_labels(const std::string& html, const std::string& kind) {
  std::vector<std::vector<double>> charts;
  size_t svg = 0;
  while ((svg = html.find("<svg", svg)) != std::string::npos) {
    size_t end = html.find("</svg>", svg);
    std::vector<double> ticks;
    const std::string key = "class=\"tick " + kind + "\"";
    for (size_t p = html.find(key, svg); p != std::string::npos && p < end; p = html.find(key, p + 1)) {
      size_t a = html.find('>', p) + 1, b = html.find('<', a);
      ticks.push_back(std::strtod(html.substr(a, b - a).c_str(), nullptr));
    }
    if (!ticks.empty()) charts.push_back(ticks);
    svg = end;
  }
  return charts;
}

// True if step = m * 10^k with m in {1, 2, 5}.
bool nice_step(double step) {
  double k = std::floor(std::log10(step) + 1e-9);
  double m = step / std::pow(10.0, k);
  return std::abs(m - 1) < 1e-6 || std::abs(m - 2) < 1e-6 || std::abs(m - 5) < 1e-6;
}

std::string error_of(const fs::path& dir) {
  try {
    write_report(dir);
  } catch (const loom::Error& e) {
    return e.what();
  }
  return "(no error)";
}

const char* kConfig = R"({"model":"mlp","lr":0.001,"epochs":3,"note":"<script>alert('x')</script> & \"q\""})";

}  // namespace

TEST_CASE("report: a full run gives HTML with one polyline per series, escaped config and nice ticks") {
  fs::path dir = fresh_dir("full");
  write(dir / "config.json", kConfig);
  std::string metrics;
  // 30 training lines (one with a NaN loss, written as null), 3 validation lines.
  for (int i = 1; i <= 30; ++i) {
    std::string loss = i == 7 ? "null" : std::to_string(2.3 * std::exp(-0.05 * i) + 0.01 * (i % 3));
    metrics += R"({"kind":"train","step":)" + std::to_string(i * 10) + R"(,"epoch":)" + std::to_string(i / 10.0) +
               R"(,"loss":)" + loss + R"(,"lr":)" + std::to_string(1e-3 * (1 - i / 31.0)) +
               R"(,"throughput":)" + std::to_string(1000 + i) +
               R"(,"throughput_unit":"samples/s","time_s":)" + std::to_string(i * 0.5) + "}\n";
    if (i % 10 == 0)
      metrics += R"({"kind":"val","step":)" + std::to_string(i * 10) + R"(,"epoch":)" + std::to_string(i / 10) +
                 R"(,"val_loss":)" + std::to_string(1.0 / i) + R"(,"val_accuracy":)" + std::to_string(0.6 + i / 100.0) +
                 "}\n";
  }
  write(dir / "metrics.jsonl", metrics);
  write_report(dir);

  REQUIRE(fs::exists(dir / "report.html"));
  const std::string html = read(dir / "report.html");
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("</html>") != std::string::npos);
  CHECK(html.find("<script") == std::string::npos);  // the config's <script> came out escaped
  CHECK(html.find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;") != std::string::npos);
  CHECK(html.find("Training report: mlp") != std::string::npos);
  CHECK(count(html, "<svg") == 5);
  CHECK(count(html, "<svg") == count(html, "</svg>"));
  CHECK(polyline_points(html, "training loss") == 29);  // the NaN point is left out...
  CHECK(polyline_points(html, "smoothed (EMA)") == 29);
  CHECK(html.find("1 non-finite training loss value was left out") != std::string::npos);  // ...and said so
  CHECK(polyline_points(html, "learning rate") == 30);
  CHECK(polyline_points(html, "throughput") == 30);
  CHECK(polyline_points(html, "validation loss") == 3);
  CHECK(polyline_points(html, "validation accuracy") == 3);
  CHECK(html.find("throughput (samples/s)") != std::string::npos);
  CHECK(html.find("accuracy (%)") != std::string::npos);
  CHECK(html.find("best validation accuracy") != std::string::npos);
  // The validation charts (epochs 1..3) have whole-epoch ticks.
  auto xticks = tick_labels(html, "xtick");
  REQUIRE(xticks.size() == 5);
  CHECK(xticks[1] == std::vector<double>{1, 2, 3});
  CHECK(xticks[2] == std::vector<double>{1, 2, 3});

  // Every chart's tick labels are evenly spaced by a 1-2-5 step and cover the data.
  for (const char* kind : {"xtick", "ytick"}) {
    auto charts = tick_labels(html, kind);
    CHECK(charts.size() == 5);
    for (const auto& ticks : charts) {
      REQUIRE(ticks.size() >= 2);
      double step = ticks[1] - ticks[0];
      CHECK(step > 0);
      for (size_t i = 1; i < ticks.size(); ++i) CHECK(ticks[i] - ticks[i - 1] == doctest::Approx(step).epsilon(1e-3));
      CHECK(nice_step(step));
    }
  }
  // The atomic write leaves no temporary file behind.
  int entries = 0;
  for (auto& e : fs::directory_iterator(dir)) entries += e.is_regular_file() ? 1 : 0;
  CHECK(entries == 3);
  fs::remove_all(dir);
}

TEST_CASE("report: no validation lines, one-point series and a truncated last line") {
  fs::path dir = fresh_dir("sparse");
  write(dir / "config.json", R"({"model":"gpt"})");
  write(dir / "metrics.jsonl",
        "\n{\"kind\":\"train\",\"step\":1,\"epoch\":0.1,\"loss\":4.5,\"lr\":0.0003,\"throughput\":5000,"
        "\"throughput_unit\":\"tokens/s\",\"time_s\":1.5}\n{\"kind\":\"train\",\"step\":2,\"lo");
  write_report(dir);
  const std::string html = read(dir / "report.html");
  CHECK(polyline_points(html, "training loss") == 1);
  CHECK(polyline_points(html, "smoothed (EMA)") == -1);  // nothing to smooth with one point
  CHECK(polyline_points(html, "validation loss") == -1);
  CHECK(count(html, "no data recorded") == 2);            // both validation charts say so
  CHECK(count(html, "class=\"marker\"") >= 3);            // lone points are drawn as dots
  CHECK(html.find("throughput (tokens/s)") != std::string::npos);
  CHECK(html.find("line 3 of metrics.jsonl is truncated") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("report: missing or malformed files are errors naming the file and line") {
  fs::path dir = fresh_dir("errors");
  CHECK(error_of(dir / "nope").find("does not exist") != std::string::npos);

  std::string e = error_of(dir);
  CHECK(e.find("config.json is missing") != std::string::npos);

  write(dir / "config.json", "{\n  \"model\": \"mlp\",\n  oops\n}\n");
  e = error_of(dir);
  CHECK(e.find("config.json:3: not valid JSON") != std::string::npos);

  write(dir / "config.json", "[1, 2]");
  CHECK(error_of(dir).find("config.json:1: expected one JSON object") != std::string::npos);

  write(dir / "config.json", kConfig);
  CHECK(error_of(dir).find("metrics.jsonl is missing") != std::string::npos);

  const std::string good = R"({"kind":"train","step":1,"epoch":0.1,"loss":1.0,"lr":0.1})";
  write(dir / "metrics.jsonl", good + "\n" + good + "\n{\"kind\": \"train\", step: 3}\n" + good + "\n");
  CHECK(error_of(dir).find("metrics.jsonl:3: not valid JSON") != std::string::npos);

  write(dir / "metrics.jsonl", good + "\n{\"kind\":\"train\",\"step\":2,\"epoch\":0.2}\n");
  e = error_of(dir);
  CHECK(e.find("metrics.jsonl:2: missing field \"loss\"") != std::string::npos);

  write(dir / "metrics.jsonl", good + "\n" + good + "\n{\"step\":2}\n");
  CHECK(error_of(dir).find("metrics.jsonl:3: missing string field \"kind\"") != std::string::npos);

  write(dir / "metrics.jsonl", "{\"kind\":\"val\",\"epoch\":\"one\",\"val_loss\":1}\n");
  CHECK(error_of(dir).find("metrics.jsonl:1: \"epoch\" should be a number") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "report.html"));  // nothing written on error
  fs::remove_all(dir);
}

TEST_CASE("report: nice_axis picks 1-2-5 steps that cover the range, format_tick and html_escape") {
  struct Case {
    double lo, hi;
  };
  for (Case c : std::vector<Case>{{0, 1}, {0.013, 0.97}, {1, 10000}, {-3.7, 12.2}, {2.31, 2.33}, {1e-5, 3e-4},
                                  {0, 0}, {5, 5}, {-1e-6, -1e-6}, {100, 157}, {0.5, 4.5}}) {
    CAPTURE(c.lo);
    CAPTURE(c.hi);
    NiceAxis a = nice_axis(c.lo, c.hi, 5);
    CHECK(nice_step(a.step));
    CHECK(a.lo <= c.lo);
    CHECK(a.hi >= c.hi);
    CHECK(a.hi > a.lo);
    CHECK(a.ticks.size() >= 2);
    CHECK(a.ticks.size() <= 12);
    CHECK(a.ticks.front() == doctest::Approx(a.lo));
    CHECK(a.ticks.back() == doctest::Approx(a.hi));
    for (double t : a.ticks) CHECK(std::abs(t / a.step - std::round(t / a.step)) < 1e-6);
  }
  NiceAxis a = nice_axis(0, 1, 5);
  CHECK(a.step == doctest::Approx(0.2));
  CHECK(a.ticks.size() == 6);
  CHECK(nice_axis(0, 97, 5).step == doctest::Approx(20));
  CHECK(nice_axis(0, 0.9, 5).step == doctest::Approx(0.2));
  CHECK(nice_axis(0, 1000, 4).step == doctest::Approx(500));  // 250 rounds up to 500, not to 200
  CHECK_THROWS_AS(nice_axis(2, 1), loom::Error);
  // Epochs: whole ticks only, even for a short range.
  NiceAxis epochs = nice_axis(1, 3, 6, 1.0);
  CHECK(epochs.step == 1);
  CHECK(epochs.ticks == std::vector<double>{1, 2, 3});
  CHECK(nice_axis(1, 3, 6).step == doctest::Approx(0.5));

  CHECK(format_tick(0.25, 0.05) == "0.25");
  CHECK(format_tick(0.2, 0.2) == "0.2");
  CHECK(format_tick(12000, 2000) == "12000");
  CHECK(format_tick(0, 0.5) == "0.0");
  CHECK(format_tick(1e-4, 5e-5) == "1.0e-4");
  CHECK(format_tick(2e8, 5e7) == "2.0e8");
  CHECK(html_escape("a<b>&\"c'") == "a&lt;b&gt;&amp;&quot;c&#39;");
}
