// The run's output directory as the agent holds it (bagua/run_agent.h): one
// run at a time per node, and each attempt's logs kept.
#include <bagua/run_agent.h>

#include <bagua/system.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

namespace bagua {

namespace fs = std::filesystem;


std::optional<std::string> OutputLock::acquire(const fs::path& dir, int node_rank) {
  return acquire(dir, "node-" + std::to_string(node_rank));
}

OutputLock::~OutputLock() {
  if (fd_ >= 0) ::close(fd_);  // the workers' inherited descriptors hold it on until they exit
}

std::optional<std::string> OutputLock::acquire(const fs::path& dir, const std::string& node) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return "cannot create the output directory " + dir.string() + ": " + ec.message();
  path_ = dir / (".bagua-run-" + node + ".lock");
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT, 0644);  // no O_CLOEXEC: the workers hold it too
  if (fd_ < 0) return "cannot open " + path_.string() + ": " + std::strerror(errno);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    std::ifstream in(path_);
    std::string holder((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    while (!holder.empty() && holder.back() == '\n') holder.pop_back();
    return "the output directory " + dir.string() + " is in use by another run (" +
           (holder.empty() ? std::string("holder unknown") : holder) +
           "); wait for it to end, stop it, or set output.dir to another directory";
  }
  const std::string host = host_name();
  std::time_t now = std::time(nullptr);
  char when[64];
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::ostringstream text;
  text << "bagua run, pid " << ::getpid() << " on " << host << ", since " << when << "\n";
  const std::string t = text.str();
  if (::ftruncate(fd_, 0) == 0) {
    ssize_t ignored = ::pwrite(fd_, t.data(), t.size(), 0);
    (void)ignored;
  }
  return std::nullopt;
}

std::optional<std::string> keep_attempt_logs(const fs::path& log_dir, int attempt, const std::vector<int>& ranks) {
  std::error_code ec;
  const fs::path kept = log_dir / ("attempt-" + std::to_string(attempt));
  fs::create_directories(kept, ec);
  auto mine = [&](const std::string& name) {
    if (ranks.empty()) return true;
    return std::any_of(ranks.begin(), ranks.end(),
                       [&](int r) { return name == "rank-" + std::to_string(r) + ".log"; });
  };
  for (const auto& entry : fs::directory_iterator(log_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.rfind("rank-", 0) == 0 && entry.path().extension() == ".log" &&
        mine(name)) {
      fs::rename(entry.path(), kept / name, ec);
    }
  }
  if (ec) return "could not keep the logs of attempt " + std::to_string(attempt) + ": " + ec.message();
  return std::nullopt;
}

}  // namespace bagua
