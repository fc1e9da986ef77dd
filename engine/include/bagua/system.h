// Small POSIX helpers every layer may use: a free TCP port, the name of a
// signal, a file replaced whole, this machine's name.
#pragma once

#include <string>

namespace bagua {

// A TCP port on addr (a host name or an IPv4/IPv6 address) that nothing
// listens on right now: bound with port 0, read back, released. Another
// process may take it before it is used; the window is short. Throws
// ConfigError when addr does not resolve, bagua::Error when nothing binds.
int find_free_port(const std::string& addr = "127.0.0.1");

// "SIGSEGV" for 11, ...; "SIG<n>" for numbers it does not know.
std::string signal_name(int signal_number);

// Writes `text` to `path` through a temporary file beside it renamed into
// place, so a reader sees the old content or the new, never half of it.
// Throws bagua::Error (a user error) naming the file when it cannot.
void write_file_atomically(const std::string& path, const std::string& text);

// This machine's host name (gethostname), "unknown" when it has none.
std::string host_name();

}  // namespace bagua
