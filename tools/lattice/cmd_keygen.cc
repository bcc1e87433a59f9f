// `lattice keygen [-o FILE] [--force]`: make a cluster secret (32 random bytes, hex).
// With -o the file is created with mode 0600 and an existing one is kept unless --force;
// without it the secret goes to stdout (for a secrets manager or LATTICE_SECRET).
#include <cstdio>
#include <memory>
#include <string>

#include "command.h"
#include "lattice/crypto/secret.h"

namespace lattice::cli {
namespace {

struct KeygenArgs {
  std::string out;
  bool force = false;
};

int run_keygen(const KeygenArgs& args) {
  auto secret = crypto::ClusterSecret::generate();
  if (args.out.empty()) {
    std::printf("%s\n", secret.to_hex().c_str());
    return 0;
  }
  Status st = crypto::write_secret_file(args.out, secret, args.force);
  if (!st.ok()) {
    std::fprintf(stderr, "lattice keygen: %s\n", st.message().c_str());
    return 1;
  }
  std::fprintf(stderr,
               "lattice keygen: wrote a new cluster secret to %s (mode 0600, fingerprint %s).\n"
               "Copy it to every host (e.g. scp -p) and pass --secret-file, or set LATTICE_SECRET_FILE.\n",
               args.out.c_str(), secret.fingerprint().c_str());
  return 0;
}

Registrar keygen_cmd{{"keygen", "make a cluster secret (32 random bytes, hex) for authenticated joins",
                      [](CLI::App& app) {
                        auto args = std::make_shared<KeygenArgs>();
                        app.add_option("-o,--output", args->out, "write it to this file (mode 0600) instead of stdout");
                        app.add_flag("--force", args->force, "replace an existing file");
                        return [args] { return run_keygen(*args); };
                      }}};

}  // namespace
}  // namespace lattice::cli
