#include "comm/network_route.h"

#include <bagua/errors.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace bagua::comm {
namespace {

std::string numeric(const sockaddr* addr, socklen_t length) {
  char text[NI_MAXHOST] = "";
  if (::getnameinfo(addr, length, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) != 0) return "?";
  return text;
}

bool same_address(const sockaddr* a, const sockaddr_storage& b) {
  if (a == nullptr || a->sa_family != b.ss_family) return false;
  if (a->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(&b)->sin_addr.s_addr;
  }
  if (a->sa_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(&b)->sin6_addr, sizeof(in6_addr)) == 0;
  }
  return false;
}

}  // namespace

NetworkRoute route_to(const std::string& host, int port) {
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    throw CommError("cannot resolve the master address '" + host + "': " + ::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, &::freeaddrinfo);
  std::string why = "no address";
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    // Connecting a UDP socket only asks the kernel for a route: nothing is sent.
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    sockaddr_storage local;
    socklen_t length = sizeof(local);
    const bool routed = ::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
                        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
    if (!routed) why = std::strerror(errno);
    ::close(fd);
    if (!routed) continue;
    NetworkRoute route;
    route.address = numeric(reinterpret_cast<const sockaddr*>(&local), length);
    ifaddrs* interfaces = nullptr;
    if (::getifaddrs(&interfaces) != 0) throw CommError(std::string("getifaddrs: ") + std::strerror(errno));
    std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> owned(interfaces, &::freeifaddrs);
    for (ifaddrs* i = interfaces; i != nullptr; i = i->ifa_next) {
      if (same_address(i->ifa_addr, local)) {
        route.interface = i->ifa_name;
        route.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
        return route;
      }
    }
    why = "the local address " + route.address + " is on no interface";
  }
  throw CommError("no route to the master address '" + host + "': " + why);
}

std::string describe_route(const NetworkRoute& route, const std::string& host) {
  std::string text = route.interface + " (" + route.address + "), the interface that routes to the master " + host;
  if (route.loopback) text += " (a loopback interface: only processes on this machine can connect)";
  return text + "; set GLOO_SOCKET_IFNAME to choose another";
}

}  // namespace bagua::comm
