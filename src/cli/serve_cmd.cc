// `kvstash serve`: loads a GGUF model (or generates the tiny demo model when no -m is given),
// starts the engine and the OpenAI-compatible HTTP server, and serves until SIGINT/SIGTERM.
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "cli/commands.h"
#include "engine/engine.h"
#include "model/model.h"
#include "modelgen/modelgen.h"
#include "server/backend.h"
#include "server/log.h"
#include "server/server.h"

namespace kvstash::cli {
namespace {

using server::log_line;

// Where the demo model is written when no -m is given: $XDG_CACHE_HOME/kvstash, else
// ~/.cache/kvstash, else the system temp directory.
std::filesystem::path demo_model_path() {
  std::filesystem::path dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    dir = std::filesystem::path(xdg) / "kvstash";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    dir = std::filesystem::path(home) / ".cache" / "kvstash";
  } else {
    dir = std::filesystem::temp_directory_path() / "kvstash";
  }
  return dir / "demo-tiny-f16.gguf";
}

Expected<std::string> ensure_demo_model() {
  std::filesystem::path path = demo_model_path();
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    log_line("no -m given: serving the demo model " + path.string() + " (tiny preset, random weights)");
    return path.string();
  }
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) return io_error("cannot create " + path.parent_path().string() + ": " + ec.message());
  modelgen::GenerateOptions options;
  options.preset = "tiny";
  options.type = gguf::TensorType::kF16;
  options.out_path = path.string();
  KVSTASH_RETURN_IF_ERROR(modelgen::generate_model(options));
  log_line("no -m given: generated the demo model " + path.string() +
           " (tiny preset, random weights; its output is gibberish)");
  return path.string();
}

}  // namespace

int serve_main(int argc, char** argv) {
  CLI::App app("OpenAI-compatible server: /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics",
               "kvstash serve");
  std::string model_path;
  server::ServerOptions server_options;
  EngineOptions engine_options;
  int max_body_mib = static_cast<int>(server_options.max_body_bytes >> 20);
  app.add_option("-m,--model", model_path, "GGUF model file; without it a tiny demo model is generated");
  app.add_option("--host", server_options.host, "Address to listen on")->capture_default_str();
  app.add_option("--port", server_options.port, "Port (0 = any free port)")->capture_default_str();
  app.add_option("--ctx", engine_options.n_ctx, "Context length: prompt + generated tokens")->capture_default_str();
  app.add_option("--parallel", engine_options.max_running, "Sequences decoded together at most")
      ->capture_default_str();
  app.add_option("--queue", engine_options.max_queued, "Requests waiting beyond the batch; more get 429")
      ->capture_default_str();
  app.add_option("--threads", engine_options.n_threads, "Compute threads (0 = all cores)")->capture_default_str();
  app.add_option("--chat-template", server_options.chat_template,
                 "Use a built-in chat template instead of the model's")
      ->check(CLI::IsMember({"chatml", "llama3"}));
  app.add_option("--alias", server_options.model_id, "Model name in the API (default: the model's name)");
  app.add_option("--max-body-mib", max_body_mib, "Largest request body, MiB")->capture_default_str();
  app.add_flag("--no-prefix-cache", [&](std::int64_t) { engine_options.prefix_cache = false; },
               "Do not reuse KV across requests");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;
  }
  if (engine_options.n_ctx < 16 || engine_options.max_running < 1 || max_body_mib < 1) {
    std::fprintf(stderr, "serve: --ctx must be >= 16, --parallel >= 1, --max-body-mib >= 1\n");
    return 1;
  }
  server_options.max_body_bytes = static_cast<std::size_t>(max_body_mib) << 20;
  // Each open request holds an HTTP worker while it waits; leave room for health checks too.
  server_options.http_threads = engine_options.max_running + engine_options.max_queued + 8;

  if (model_path.empty()) {
    Expected<std::string> demo = ensure_demo_model();
    if (!demo) {
      log_line("serve: cannot generate the demo model: " + demo.status().to_string());
      return 1;
    }
    model_path = *demo;
  }
  Expected<std::unique_ptr<Model>> model = Model::load(model_path);
  if (!model) {
    log_line("serve: " + model.status().to_string());
    return 1;
  }
  Expected<std::unique_ptr<Engine>> engine = Engine::create(**model, engine_options);
  if (!engine) {
    log_line("serve: " + engine.status().to_string());
    return 1;
  }
  std::unique_ptr<server::GenerationBackend> backend = server::make_engine_backend(**engine, server_options.model_id);
  Expected<std::unique_ptr<server::Server>> http = server::Server::create(*backend, server_options);
  if (!http) {
    log_line("serve: " + http.status().to_string());
    return 1;
  }

  // Block the stop signals in every thread (the server's threads inherit the mask), then wait
  // for one here.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  if (Status st = (*http)->start(); !st.is_ok()) {
    log_line("serve: " + st.to_string());
    return 1;
  }
  const ModelConfig& config = (*model)->config();
  log_line("serving " + backend->model_info().id + " (" + config.architecture + ", " +
           std::to_string(config.n_layers) + " layers, vocab " + std::to_string(config.n_vocab) + ") from " +
           model_path + " on http://" + server_options.host + ":" + std::to_string((*http)->port()) +
           " (ctx " + std::to_string(engine_options.n_ctx) + ", parallel " +
           std::to_string(engine_options.max_running) + ")");
  int signal = 0;
  sigwait(&stop_signals, &signal);
  log_line(std::string("received ") + (signal == SIGINT ? "SIGINT" : "SIGTERM") + ", stopping");
  (*http)->stop();
  return 0;
}

}  // namespace kvstash::cli
