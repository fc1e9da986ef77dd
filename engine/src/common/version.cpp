#include <bagua/version.h>

namespace bagua {

const char* version() { return BAGUA_VERSION_STRING; }

}  // namespace bagua
