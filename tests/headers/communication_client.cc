// A client of the communication API alone: it catches the errors that
// communication.h documents, with no other bagua header included.
#include <bagua/communication.h>

bool joined_twice_is_refused() {
  try {
    bagua::init_process_group();
    bagua::init_process_group();
  } catch (const bagua::RepeatedInitializationError&) {
    return true;
  } catch (const bagua::CommError&) {
    return false;
  }
  return false;
}
