// CSQLite: SQLite 3 from libsqlite3-dev. Imported only by ShoalStore.
#include <sqlite3.h>

// SQLITE_TRANSIENT is a macro that casts -1 to a function pointer; Swift cannot import it.
static inline sqlite3_destructor_type shoal_sqlite_transient(void) { return SQLITE_TRANSIENT; }
