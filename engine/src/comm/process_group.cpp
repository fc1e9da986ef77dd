// init_process_group, groups and their intra-/inter-node sub-groups.
#include "comm/process_group_impl.h"

#include "comm/network_route.h"

#include <bagua/errors.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

namespace bagua {
namespace comm {

std::string format_ranks(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  out << "]";
  return out.str();
}

namespace {

struct GlobalState {
  std::mutex mutex;
  std::shared_ptr<World> world;
  ProcessGroupPtr default_group;
  // This process's count of init_process_group() calls: every rank makes
  // as many, so the Nth of one rank meets the Nth of the others.
  int generation = 0;
  // The world destroy_process_group() left, alive while a group handle
  // from before holds it (and, on rank 0, the old store's port).
  std::weak_ptr<World> previous;
};

GlobalState& global() {
  static GlobalState state;
  return state;
}

// Reads an integer environment variable. Appends to `problems` instead of
// throwing, so one message can name every bad variable.
std::optional<long> read_int(const char* name, bool required, std::vector<std::string>& problems) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') {
    if (required) problems.push_back(std::string(name) + " is not set");
    return std::nullopt;
  }
  errno = 0;
  char* end = nullptr;
  long value = std::strtol(raw, &end, 10);
  if (errno != 0 || end == raw || *end != '\0') {
    problems.push_back(std::string(name) + "='" + raw + "' is not an integer");
    return std::nullopt;
  }
  return value;
}

std::string format_seconds(std::chrono::milliseconds ms) {
  std::ostringstream out;
  out << ms.count() / 1000.0 << " s";
  return out.str();
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

std::chrono::milliseconds timeout_from_env(std::chrono::milliseconds fallback) {
  const char* raw = std::getenv("BAGUA_TIMEOUT_S");
  if (raw == nullptr || *raw == '\0') return fallback;
  char* end = nullptr;
  double seconds = std::strtod(raw, &end);
  if (end == raw || *end != '\0' || !(seconds > 0)) {
    throw ConfigError(std::string("environment variable BAGUA_TIMEOUT_S='") + raw +
                      "' is not a positive number of seconds");
  }
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
}

// The nodes none of whose ranks arrived, in words (" (node 1 never joined,
// counting 2 ranks per node)"), or "" when every node sent some. Ranks are
// mapped to nodes as torchrun and bagua's launcher number them: node N has
// ranks N*LOCAL_WORLD_SIZE onwards.
std::string missing_nodes(const World& world, const std::vector<int>& missing) {
  if (world.local_size >= world.world_size || world.world_size % world.local_size != 0) return "";
  std::vector<int> absent;
  for (int node = 0; node < world.world_size / world.local_size; ++node) {
    int gone = 0;
    for (int r : missing) gone += r / world.local_size == node;
    if (gone == world.local_size) absent.push_back(node);
  }
  if (absent.empty()) return "";
  std::string nodes;
  for (size_t i = 0; i < absent.size(); ++i) nodes += (i ? ", " : "") + std::to_string(absent[i]);
  return std::string(" (node") + (absent.size() > 1 ? "s " : " ") + nodes + " never joined, counting " +
         std::to_string(world.local_size) + " ranks per node)";
}

// Waits until every rank has announced itself in the store, or names the
// ranks that did not within the timeout.
void wait_for_all_ranks(World& world) {
  world.store->set("bagua/arrived/" + std::to_string(world.rank), std::vector<uint8_t>{1});
  std::vector<std::string> keys;
  for (int r = 0; r < world.world_size; ++r) keys.push_back("bagua/arrived/" + std::to_string(r));
  try {
    world.store->wait(keys, world.timeout);
  } catch (const std::exception&) {
    std::vector<int> missing;
    for (int r = 0; r < world.world_size; ++r) {
      if (!world.store->check({keys[r]})) missing.push_back(r);
    }
    throw CommError("rendezvous timed out after " + format_seconds(world.timeout) + ": " + std::to_string(world.world_size - missing.size()) + " of " +
                    std::to_string(world.world_size) + " ranks arrived; missing ranks " +
                    format_ranks(missing) + missing_nodes(world, missing) +
                    " (did every worker start, with the same MASTER_ADDR, MASTER_PORT and "
                    "WORLD_SIZE, and in the same restart attempt, TORCHELASTIC_RESTART_COUNT?)");
  }
}

// Learns every rank's (node, local rank) with one allgather on the default group.
void gather_layout(World& world, Backend& backend) {
  at::Tensor mine = at::tensor({static_cast<int64_t>(world.node_rank),
                                static_cast<int64_t>(world.local_rank)},
                               at::kLong);
  at::Tensor all = at::empty({world.world_size, 2}, at::kLong);
  std::vector<at::Tensor> inputs{mine};
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < world.world_size; ++r) outputs[0].push_back(all[r]);
  if (world.backend == "nccl") {
    const at::Device gpu(at::kCUDA, static_cast<c10::DeviceIndex>(world.cuda_device));
    inputs[0] = inputs[0].to(gpu);
    for (auto& t : outputs[0]) t = t.to(gpu);
  }
  backend.allgather(outputs, inputs)->wait();
  world.node_of.resize(world.world_size);
  world.local_rank_of.resize(world.world_size);
  for (int r = 0; r < world.world_size; ++r) {
    at::Tensor row = outputs[0][r].cpu();
    world.node_of[r] = static_cast<int>(row[0].item<int64_t>());
    world.local_rank_of[r] = static_cast<int>(row[1].item<int64_t>());
  }
}

std::vector<int> members_where(const ProcessGroup::Impl& group, bool same_node) {
  const World& w = *group.world;
  std::vector<int> out;
  for (int r : group.ranks) {
    bool keep = same_node ? w.node_of[r] == w.node_rank : w.local_rank_of[r] == w.local_rank;
    if (keep) out.push_back(r);
  }
  return out;
}

// Creates (or finds) the intra- or inter-node sub-group of `group`.
std::shared_ptr<ProcessGroup> sub_group(ProcessGroup& group, bool intra) {
  auto& impl = group.impl();
  if (impl.rank < 0) {
    throw InvalidArgument("this process is not a member of " + impl.describe());
  }
  std::lock_guard<std::mutex> lock(impl.sub_mutex);
  bool& is_self = intra ? impl.intra_is_self : impl.inter_is_self;
  auto& slot = intra ? impl.intra : impl.inter;
  if (is_self) return group.shared_from_this();
  if (slot) return slot;
  std::vector<int> members = members_where(impl, intra);
  if (members == impl.ranks) {
    is_self = true;
    return group.shared_from_this();
  }
  const World& w = *impl.world;
  std::string suffix = intra ? "intra" + std::to_string(w.node_rank) + "/"
                             : "inter" + std::to_string(w.local_rank) + "/";
  slot = make_group(impl.world, members, impl.prefix + suffix, impl.backend_name);
  slot->set_verify_collectives(impl.verify.load());
  return slot;
}

// The node leaders of `group` (see node_leaders_group()).
std::shared_ptr<ProcessGroup> leaders_group(ProcessGroup& group) {
  auto& impl = group.impl();
  if (impl.rank < 0) throw InvalidArgument("this process is not a member of " + impl.describe());
  std::lock_guard<std::mutex> lock(impl.sub_mutex);
  if (impl.leaders_is_self) return group.shared_from_this();
  if (impl.leaders) return impl.leaders;
  const World& w = *impl.world;
  std::vector<int> leaders;
  std::set<int> nodes;
  for (int r : impl.ranks) {
    if (nodes.insert(w.node_of[r]).second) leaders.push_back(r);
  }
  if (leaders == impl.ranks) {
    impl.leaders_is_self = true;
    return group.shared_from_this();
  }
  impl.leaders = make_group(impl.world, leaders, impl.prefix + "leaders/", impl.backend_name);
  impl.leaders->set_verify_collectives(impl.verify.load());
  return impl.leaders;
}

}  // namespace

// Creates the sub-groups of a new group, in the same order on every member.
void make_sub_groups(ProcessGroup& group) {
  if (!group.is_member()) return;
  group.intra_node_group();
  group.inter_node_group();
  group.node_leaders_group();
}

std::shared_ptr<ProcessGroup> make_group(const std::shared_ptr<World>& world,
                                         const std::vector<int>& ranks,
                                         const std::string& prefix,
                                         const std::string& backend) {
  auto impl = std::make_shared<ProcessGroup::Impl>();
  impl->world = world;
  impl->backend_name = backend.empty() ? world->backend : backend;
  impl->ranks = ranks;
  impl->prefix = prefix;
  impl->verify = world->verify_default;
  auto it = std::find(ranks.begin(), ranks.end(), world->rank);
  if (it != ranks.end()) {
    impl->rank = static_cast<int>(it - ranks.begin());
    auto store = make_prefix_store(prefix, world->store);
    int size = static_cast<int>(ranks.size());
    try {
      impl->backend = impl->backend_name == "nccl"
                          ? make_nccl(store, impl->rank, size, world->timeout)
                          : make_gloo(store, impl->rank, size, world->timeout, world->gloo_interface, world->loopback_only);
      if (impl->backend_name == "nccl") {
        std::lock_guard<std::mutex> lock(world->nccl_mutex);
        world->nccl_backends.push_back(impl->backend);
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw CommError("could not connect " + impl->describe() + ": " + e.what());
    }
  }
  return std::make_shared<ProcessGroup>(impl);
}

void release_nccl_backends(World& world) {
  std::vector<BackendPtr> backends;
  {
    std::lock_guard<std::mutex> lock(world.nccl_mutex);
    backends.swap(world.nccl_backends);
  }
  for (auto& b : backends) {
    try {
      release_nccl(b);
    } catch (const std::exception&) {
      // Exiting anyway; the communicator is gone either way.
    }
  }
}

}  // namespace comm

// ---------------------------------------------------------------- ProcessGroup

std::string ProcessGroup::Impl::describe() const {
  std::string out = "group " + comm::format_ranks(ranks);
  if (rank >= 0) out += " (rank " + std::to_string(rank) + " of " + std::to_string(ranks.size()) + ")";
  return out;
}

ProcessGroup::ProcessGroup(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
int ProcessGroup::rank() const { return impl_->rank; }
int ProcessGroup::size() const { return static_cast<int>(impl_->ranks.size()); }
const std::vector<int>& ProcessGroup::ranks() const { return impl_->ranks; }
std::string ProcessGroup::backend() const { return impl_->backend_name; }
void ProcessGroup::set_verify_collectives(bool on) {
  impl_->verify = on;
  std::lock_guard<std::mutex> lock(impl_->sub_mutex);
  for (auto* sub : {&impl_->intra, &impl_->inter, &impl_->leaders}) {
    if (*sub) (*sub)->set_verify_collectives(on);
  }
}
bool ProcessGroup::verify_collectives() const { return impl_->verify; }
int64_t ProcessGroup::bytes_sent() const {
  int64_t total = impl_->bytes_sent.load();
  std::lock_guard<std::mutex> lock(impl_->sub_mutex);
  for (const auto* sub : {&impl_->intra, &impl_->inter, &impl_->leaders}) {
    if (*sub && sub->get() != this) total += (*sub)->bytes_sent();
  }
  return total;
}
std::shared_ptr<ProcessGroup> ProcessGroup::duplicate(const std::string& backend) {
  if (!backend.empty() && backend != "gloo" && backend != "nccl") {
    throw InvalidArgument("duplicate: unknown backend '" + backend + "' (expected gloo or nccl)");
  }
  if (backend == "nccl" && impl_->world->cuda_device < 0) {
    throw InvalidArgument("duplicate: backend nccl needs the default group on NCCL (one GPU per rank); it is on " +
                          impl_->world->backend);
  }
  int n;
  {
    std::lock_guard<std::mutex> lock(impl_->sub_mutex);
    n = impl_->duplicates++;
  }
  auto copy = comm::make_group(impl_->world, impl_->ranks, impl_->prefix + "dup" + std::to_string(n) + "/",
                               backend.empty() ? impl_->backend_name : backend);
  copy->set_verify_collectives(impl_->verify.load());
  comm::make_sub_groups(*copy);
  return copy;
}
std::shared_ptr<ProcessGroup> ProcessGroup::intra_node_group() { return comm::sub_group(*this, true); }
std::shared_ptr<ProcessGroup> ProcessGroup::inter_node_group() { return comm::sub_group(*this, false); }
std::shared_ptr<ProcessGroup> ProcessGroup::node_leaders_group() { return comm::leaders_group(*this); }

// ---------------------------------------------------------------- init

namespace {
void destroy_world(bool together);

// At exit nothing waits for the peers (one may be gone).
void destroy_at_exit() {
  try {
    destroy_world(false);
  } catch (const std::exception&) {
    // Exiting anyway.
  }
}
}  // namespace

namespace {

// The world torchrun's variables describe (every problem with them at once
// in one ConfigError), with the master's address and port.
std::shared_ptr<comm::World> world_from_env(const InitOptions& options, std::string* addr, int* port_out) {
  std::vector<std::string> problems;
  auto rank = comm::read_int("RANK", true, problems);
  auto world_size = comm::read_int("WORLD_SIZE", true, problems);
  auto local_rank = comm::read_int("LOCAL_RANK", false, problems);
  auto local_size = comm::read_int("LOCAL_WORLD_SIZE", false, problems);
  auto group_rank = comm::read_int("GROUP_RANK", false, problems);
  // A one-node bagua run's workers meet through a file (BAGUA_STORE_FILE)
  // and need no master address or port.
  const std::string store_file = comm::store_file_from_env();
  auto port = comm::read_int("MASTER_PORT", store_file.empty(), problems);
  const char* addr_raw = std::getenv("MASTER_ADDR");
  if (store_file.empty() && (addr_raw == nullptr || *addr_raw == '\0')) problems.push_back("MASTER_ADDR is not set");
  if (world_size && *world_size < 1) problems.push_back("WORLD_SIZE must be at least 1");
  if (rank && world_size && (*rank < 0 || *rank >= *world_size)) {
    problems.push_back("RANK=" + std::to_string(*rank) + " is outside [0, WORLD_SIZE=" +
                       std::to_string(*world_size) + ")");
  }
  if (port && (*port < 1 || *port > 65535)) {
    problems.push_back("MASTER_PORT=" + std::to_string(*port) + " is not a port (1-65535)");
  }
  if (local_size && *local_size < 1) problems.push_back("LOCAL_WORLD_SIZE must be at least 1");
  if (local_rank && local_size && (*local_rank < 0 || *local_rank >= *local_size)) {
    problems.push_back("LOCAL_RANK=" + std::to_string(*local_rank) +
                       " is outside [0, LOCAL_WORLD_SIZE=" + std::to_string(*local_size) + ")");
  }
  if (!problems.empty()) {
    std::string message = "cannot join the process group: ";
    for (size_t i = 0; i < problems.size(); ++i) message += (i ? "; " : "") + problems[i];
    message +=
        ". These are torchrun's variables: `bagua launch` and `bagua run` set them; when you "
        "start workers yourself, set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (LOCAL_RANK "
        "and LOCAL_WORLD_SIZE default to a single node).";
    throw ConfigError(message);
  }

  auto world = std::make_shared<comm::World>();
  world->rank = static_cast<int>(*rank);
  world->world_size = static_cast<int>(*world_size);
  world->local_rank = static_cast<int>(local_rank.value_or(*rank));
  world->local_size = static_cast<int>(local_size.value_or(*world_size));
  world->node_rank = group_rank ? static_cast<int>(*group_rank)
                                : (world->rank - world->local_rank) / world->local_size;
  world->timeout = comm::timeout_from_env(options.timeout);
  world->verify_default = options.verify_collectives;
  if (const char* v = std::getenv("BAGUA_VERIFY_COLLECTIVES"); v && std::string(v) == "0") {
    world->verify_default = false;
  }
  *addr = addr_raw != nullptr && *addr_raw != '\0' ? addr_raw : "127.0.0.1";
  *port_out = static_cast<int>(port.value_or(0));
  world->loopback_only = !store_file.empty() || comm::is_loopback(*addr);
  return world;
}

// Under a launcher that serves the store itself (bagua run, torchrun's
// agent), rank 0 is one more client.
bool agent_serves_store() {
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  return agent != nullptr && (std::string(agent) == "True" || std::string(agent) == "1");
}

// The store at addr:port: rank 0's own server, or a client of it (or of
// the launcher's).
comm::StorePtr connect_tcp(const comm::World& world, const std::string& addr, int port, bool previous_alive) {
  try {
    return comm::make_tcp_store(addr, port, world.rank == 0 && !agent_serves_store(), world.world_size,
                                world.timeout);
  } catch (const std::exception& e) {
    std::string why = e.what();
    if (world.rank == 0 && previous_alive) {
      throw CommError("rank 0 could not serve the rendezvous store on " + addr + ":" + std::to_string(port) +
                      " again: the store of the process group before destroy_process_group() still holds the "
                      "port, kept by a group handle this process still holds (a ProcessGroupPtr from new_group(), "
                      "default_group(), duplicate() or a sub-group); release every one before "
                      "init_process_group() is called again (" + why + ")");
    }
    if (world.rank == 0) {
      // Its own server listens on every interface; what failed may be its
      // client's connection to a master address that does not resolve.
      try {
        comm::route_to(addr, port);
      } catch (const CommError& unresolved) {
        throw ConfigError(std::string(unresolved.what()) + " (MASTER_ADDR, or distributed.master_addr): rank 0 " +
                        "could not reach its own rendezvous store there; name node 0's host or address");
      }
      throw CommError("rank 0 could not serve the rendezvous store on " + addr + ":" + std::to_string(port) +
                      " (is MASTER_PORT already in use?): " + why);
    }
    throw CommError("could not reach the rendezvous store at " + addr + ":" + std::to_string(port) + " within " +
                    comm::format_seconds(world.timeout) +
                    " (is rank 0 running, and MASTER_ADDR/MASTER_PORT right?): " + why);
  }
}

constexpr const char* kGenerationKey = "bagua/generation";
constexpr const char* kNeverSetKey = "bagua/never-set";

// Where rank 0 says, as it leaves the group of its `generation`th
// init_process_group(), whether its store closes ("close") or stays up
// ("kept"; see leave_together()).
std::string closing_key(int generation) { return "bagua/closing/" + std::to_string(generation); }

// The store rank 0 serves for this, the process's `generation`th
// init_process_group(). A rank that destroyed its group and joins again
// may find rank 0's previous store still up (rank 0 has not left it yet):
// it leaves that one and connects again until rank 0 serves the new one,
// rather than rendezvousing with a group that is going away.
comm::StorePtr connect_tcp_generation(const comm::World& world, const std::string& addr, int port, int generation,
                                      bool previous_alive) {
  const std::string mine = std::to_string(generation);
  if (agent_serves_store()) return connect_tcp(world, addr, port, previous_alive);
  if (world.rank == 0) {
    comm::StorePtr store = connect_tcp(world, addr, port, previous_alive);
    store->set(kGenerationKey, std::vector<uint8_t>(mine.begin(), mine.end()));
    return store;
  }
  const auto deadline = std::chrono::steady_clock::now() + world.timeout;
  std::string last = "none";
  bool older_kept = false;  // the older store rank 0 still serves is held by a kept group handle
  for (;;) {
    comm::StorePtr store = connect_tcp(world, addr, port, previous_alive);
    try {
      store->wait({kGenerationKey}, world.timeout);
      const std::vector<uint8_t> v = store->get(kGenerationKey);
      last.assign(v.begin(), v.end());
      if (last == mine) return store;
      if (std::stoi(last) > generation) {
        throw CommError("rank 0 is at its init_process_group() number " + last + ", this rank (" +
                        std::to_string(world.rank) + ") at its number " + mine +
                        ": every rank calls init_process_group() and destroy_process_group() as often as the others");
      }
      if (store->check({closing_key(std::stoi(last))})) {
        const std::vector<uint8_t> word = store->get(closing_key(std::stoi(last)));
        older_kept = std::string(word.begin(), word.end()) == "kept";
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      last = e.what();  // rank 0's previous store closed under us: connect again
    }
    store.reset();
    if (std::chrono::steady_clock::now() >= deadline) {
      const std::string found =
          older_kept ? "rank 0 still serves the store of its init_process_group() number " + last +
                           ", kept up by a group handle rank 0 held across destroy_process_group() (release every "
                           "ProcessGroupPtr before init_process_group() is called again)"
                     : "rank 0's: " + last;
      throw CommError("rank " + std::to_string(world.rank) + " found no rendezvous store of init_process_group() number " +
                      mine + " at " + addr + ":" + std::to_string(port) + " within " +
                      comm::format_seconds(world.timeout) + " (" + found + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// A one-node bagua run's store: the file its launcher made (BAGUA_STORE_FILE).
comm::StorePtr connect_file(const comm::World& world, const std::string& file) {
  try {
    comm::StorePtr store = comm::make_file_store(file);
    store->setTimeout(world.timeout);
    return store;
  } catch (const std::exception& e) {
    throw CommError("cannot open the run's rendezvous store " + file + " (BAGUA_STORE_FILE): " + e.what());
  }
}

// The rendezvous store (BAGUA_STORE_FILE's, else the one at addr:port,
// served by rank 0 unless a launcher serves it), then Gloo's interface: the
// user's GLOO_SOCKET_IFNAME, else the one that routes to the master (bagua's
// launcher sets GLOO_SOCKET_IFNAME to it, and says so, for its workers),
// loopback when every peer is local; keys scoped to the launcher's restart
// attempt where the store outlives attempts, so a restarted node never meets
// (or counts) a worker of a previous attempt (comm::rendezvous_scope()).
void connect(comm::World& world, const std::string& addr, int port, int generation, bool previous_alive) {
  const std::string file = comm::store_file_from_env();
  world.store = file.empty() ? connect_tcp_generation(world, addr, port, generation, previous_alive)
                             : connect_file(world, file);
  if (file.empty() && !agent_serves_store()) world.rank0_store = world.store;
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    world.gloo_interface = ifname;
  } else if (!world.loopback_only) {
    const comm::NetworkRoute route = comm::route_to(addr, port);
    world.gloo_interface = route.interface;
    if (world.local_rank == 0) {
      std::fprintf(stderr, "bagua: node %d: Gloo uses %s\n", world.node_rank, comm::describe_route(route, addr).c_str());
    }
  }
  if (const std::string scope = comm::rendezvous_scope(); !scope.empty()) {
    world.store = comm::make_prefix_store(scope, world.store);
  }
  // A store that outlives a group (a launcher's, a file) still holds the
  // previous group's keys: each init_process_group() after the first
  // keeps to its own.
  if (generation > 1) world.store = comm::make_prefix_store("init" + std::to_string(generation) + "/", world.store);
}

}  // namespace

void init_process_group(const InitOptions& options) {
  auto& g = comm::global();
  std::lock_guard<std::mutex> lock(g.mutex);
  if (g.world) throw RepeatedInitializationError();

  std::string addr;
  int port = 0;
  std::shared_ptr<comm::World> world = world_from_env(options, &addr, &port);
  std::string backend = options.backend;
  if (const char* b = std::getenv("BAGUA_BACKEND"); b && *b) backend = b;
  if (backend != "auto" && backend != "gloo" && backend != "nccl") {
    throw ConfigError("unknown backend '" + backend + "' (expected auto, gloo or nccl)");
  }
  // A rank "owns" a GPU when its node has at least one visible GPU per local
  // worker: NCCL cannot put two ranks of a group on one device.
  const int gpus = comm::cuda_device_count();
  const bool owns_gpu = gpus > 0 && gpus >= world->local_size;
  if (backend == "nccl" && comm::cuda_built() && !owns_gpu) {
    throw ConfigError("backend nccl needs one GPU per worker, but this node has " + std::to_string(gpus) +
                      " visible GPU(s) for LOCAL_WORLD_SIZE=" + std::to_string(world->local_size) +
                      " workers (NCCL cannot put two ranks on one GPU); use backend gloo, which takes CUDA "
                      "tensors too, or fewer workers per node");
  }
  const int generation = ++g.generation;
  try {
    connect(*world, addr, port, generation, !g.previous.expired());
  } catch (...) {
    --g.generation;  // not joined: a retry is this same init
    throw;
  }
  if (backend == "auto") {
    world->store->set("bagua/owns_gpu/" + std::to_string(world->rank),
                      std::vector<uint8_t>{static_cast<uint8_t>(owns_gpu ? 1 : 0)});
  }
  comm::wait_for_all_ranks(*world);
  if (backend == "auto") {
    // Every rank reads every rank's answer, so all pick the same backend.
    bool all_own = true;
    for (int r = 0; r < world->world_size && all_own; ++r) {
      auto v = world->store->get("bagua/owns_gpu/" + std::to_string(r));
      all_own = !v.empty() && v[0] == 1;
    }
    backend = all_own ? "nccl" : "gloo";
  }
  world->backend = backend;
  if (backend == "nccl") {
    world->cuda_device = world->local_rank;
    comm::set_cuda_device(world->cuda_device);
    // NCCL groups must be gone before CUDA shuts down at exit (c10d's
    // destructor calls into CUDA). Registered after CUDA started, so it runs
    // before CUDA's own teardown.
    static const bool registered = std::atexit(destroy_at_exit) == 0;
    (void)registered;
  }

  std::vector<int> all(world->world_size);
  for (int r = 0; r < world->world_size; ++r) all[r] = r;
  auto group = comm::make_group(world, all, "bagua/default/");
  comm::gather_layout(*world, *group->impl().backend);
  // Sub-groups are created now, in the same order on every rank, so that
  // their connection set-up can never interleave with other collectives.
  comm::make_sub_groups(*group);
  g.world = world;
  g.default_group = group;
}

bool is_initialized() {
  auto& g = comm::global();
  std::lock_guard<std::mutex> lock(g.mutex);
  return g.world != nullptr;
}

namespace {

// The ranks of a group whose store rank 0 serves leave it together: each
// says it is leaving, and rank 0 waits until all have said so. Rank 0 then
// says whether its store closes (nothing else holds the world) or stays up
// (a group handle kept across destroy_process_group() holds it); the others
// wait for that word, and for the close itself when it comes (their wait
// ends when the store's connection closes). No rank can then join again at
// rank 0's port while the old store still listens, which c10d's client
// does not survive (it aborts the process when a listener it connected to
// closes before accepting it), and no rank waits out its timeout for a
// close that is not coming.
// Returns, on rank 0, its store, for announce_closing() once it knows.
comm::StorePtr leave_together(comm::World& world, int generation) {
  if (world.world_size < 2 || !world.rank0_store) return {};
  const std::string key = "bagua/leaving/" + std::to_string(generation);
  try {
    world.rank0_store->add(key, 1);
    if (world.rank == 0) {
      const auto deadline = std::chrono::steady_clock::now() + world.timeout;
      while (world.rank0_store->add(key, 0) < world.world_size && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return world.rank0_store;
    }
    world.rank0_store->wait({closing_key(generation)}, world.timeout);
    const std::vector<uint8_t> word = world.rank0_store->get(closing_key(generation));
    if (std::string(word.begin(), word.end()) == "close") world.rank0_store->wait({kNeverSetKey}, world.timeout);
  } catch (const std::exception&) {
    // The store closed (what the wait was for), or a peer is gone: leave.
  }
  return {};
}

// Rank 0, its world released: tells the others whether its store closes
// with the last reference, `store`, which it then drops.
void announce_closing(comm::StorePtr store, int generation, bool closes) {
  const std::string word = closes ? "close" : "kept";
  try {
    store->set(closing_key(generation), std::vector<uint8_t>(word.begin(), word.end()));
  } catch (const std::exception&) {
    // Nobody is left to tell.
  }
}

void destroy_world(bool together) {
  auto& g = comm::global();
  std::lock_guard<std::mutex> lock(g.mutex);
  comm::StorePtr rank0_store;
  if (g.world && together) rank0_store = leave_together(*g.world, g.generation);
  if (g.world) comm::release_nccl_backends(*g.world);
  g.previous = g.world;
  g.default_group.reset();
  g.world.reset();
  if (rank0_store) announce_closing(std::move(rank0_store), g.generation, g.previous.expired());
}

}  // namespace

void destroy_process_group() { destroy_world(true); }

namespace {
std::shared_ptr<comm::World> world_or_throw() {
  auto& g = comm::global();
  std::lock_guard<std::mutex> lock(g.mutex);
  if (!g.world) {
    throw InvalidArgument("the process group is not initialized: call bagua::init_process_group() first");
  }
  return g.world;
}
}  // namespace

ProcessGroupPtr default_group() {
  world_or_throw();
  auto& g = comm::global();
  std::lock_guard<std::mutex> lock(g.mutex);
  return g.default_group;
}

int get_rank() { return world_or_throw()->rank; }
int get_world_size() { return world_or_throw()->world_size; }
int get_local_rank() { return world_or_throw()->local_rank; }
int get_local_size() { return world_or_throw()->local_size; }
int get_node_rank() { return world_or_throw()->node_rank; }

ProcessGroupPtr new_group(const std::vector<int>& ranks) {
  auto world = world_or_throw();
  if (ranks.empty()) throw InvalidArgument("new_group: the list of ranks is empty");
  std::set<int> seen;
  for (int r : ranks) {
    if (r < 0 || r >= world->world_size) {
      throw InvalidArgument("new_group: rank " + std::to_string(r) + " is outside [0, " +
                            std::to_string(world->world_size) + ")");
    }
    if (!seen.insert(r).second) {
      throw InvalidArgument("new_group: rank " + std::to_string(r) + " is listed twice");
    }
  }
  int id;
  {
    auto& g = comm::global();
    std::lock_guard<std::mutex> lock(g.mutex);
    id = world->next_group_id++;
  }
  std::string prefix = "bagua/group" + std::to_string(id) + "/";
  // Members compare their lists through the store, so a rank that passed
  // other ranks fails with a clear message instead of a connection hang.
  if (std::find(ranks.begin(), ranks.end(), world->rank) != ranks.end()) {
    std::string mine = comm::format_ranks(ranks);
    auto key = prefix + "ranks";
    if (ranks.front() == world->rank) {
      world->store->set(key, std::vector<uint8_t>(mine.begin(), mine.end()));
    } else {
      std::vector<uint8_t> theirs_raw;
      try {
        theirs_raw = world->store->get(key);
      } catch (const std::exception& e) {
        throw CommError("new_group " + mine + ": rank " + std::to_string(ranks.front()) +
                        " did not create the group within the timeout: " + e.what());
      }
      std::string theirs(theirs_raw.begin(), theirs_raw.end());
      if (theirs != mine) {
        throw CommError("new_group call #" + std::to_string(id) + ": rank " +
                        std::to_string(world->rank) + " asked for " + mine + " but rank " +
                        std::to_string(ranks.front()) + " asked for " + theirs +
                        " (every process must call new_group with the same ranks, in the same order)");
      }
    }
  }
  auto group = comm::make_group(world, ranks, prefix);
  comm::make_sub_groups(*group);
  return group;
}

}  // namespace bagua
