// The kvstash subcommands. Each takes the arguments after its name (argv[0] is the subcommand's
// name) and returns the process exit code. main.cc dispatches on argv[1].
#pragma once

namespace kvstash::cli {

int gen_model_main(int argc, char** argv);     // src/cli/gen_model_cmd.cc
int tokenize_main(int argc, char** argv);      // src/cli/tokenize_cmd.cc
int run_main(int argc, char** argv);           // src/cli/run_cmd.cc
int bench_engine_main(int argc, char** argv);  // src/cli/bench_engine_cmd.cc
int serve_main(int argc, char** argv);         // src/cli/serve_cmd.cc
int route_main(int argc, char** argv);         // src/cli/route_cmd.cc
int bench_main(int argc, char** argv);         // src/cli/bench_cmd.cc
int cache_main(int argc, char** argv);         // src/cli/cache_cmd.cc
int bench_cache_main(int argc, char** argv);   // src/cli/bench_cache_cmd.cc
int quantize_main(int argc, char** argv);      // src/cli/quantize_cmd.cc
int peers_main(int argc, char** argv);         // src/cli/peers_cmd.cc

}  // namespace kvstash::cli
