#include "lattice/doctor/control.h"

#include "lattice/cluster/cluster.h"

namespace lattice::doctor::detail {
namespace {

class ClusterControl final : public Control {
 public:
  explicit ClusterControl(std::unique_ptr<cluster::Cluster> c) : c_(std::move(c)) {}
  Result<std::vector<std::string>> allgather(const std::string& data, Deadline deadline) override {
    return c_->allgather(data, deadline);
  }

 private:
  std::unique_ptr<cluster::Cluster> c_;
};

}  // namespace

Result<std::unique_ptr<Control>> join_control(const std::string& secret_file, Deadline deadline) {
  LATTICE_ASSIGN_OR_RETURN(auto options, cluster::cluster_options_from_env(secret_file));
  options.control_only = true;
  LATTICE_ASSIGN_OR_RETURN(auto c, cluster::join_cluster(std::move(options), deadline));
  return std::unique_ptr<Control>(std::make_unique<ClusterControl>(std::move(c)));
}

}  // namespace lattice::doctor::detail
