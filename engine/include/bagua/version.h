// The version of libbagua and of the bagua command.
#pragma once

namespace bagua {

// "MAJOR.MINOR.PATCH", the project version from CMakeLists.txt.
const char* version();

}  // namespace bagua
