// Which network interface this machine uses to reach another host, so Gloo
// binds where the peers can connect. Without this, Gloo binds to the
// address the host name resolves to, which on a stock Debian host is a
// loopback address (127.0.1.1): peers on other machines then dial
// 127.0.x.x and reach nothing.
#pragma once

#include <string>

namespace bagua::comm {

struct NetworkRoute {
  std::string interface;  // e.g. "eth0"
  std::string address;    // this machine's address on it, e.g. "10.0.0.2"
  bool loopback = false;  // the route stays on this machine (lo)
};

// The interface and local address the kernel would send from to reach
// host:port (a UDP socket connected there, getsockname, then the interface
// holding that address, from getifaddrs). Sends nothing. Throws CommError
// naming the host when it does not resolve or no route leads there.
NetworkRoute route_to(const std::string& host, int port);

// The line users see: "eth0 (10.0.0.2), the interface that routes to the
// master 10.0.0.1; set GLOO_SOCKET_IFNAME to choose another".
std::string describe_route(const NetworkRoute& route, const std::string& host);

}  // namespace bagua::comm
