// CSQLite: SQLite 3 from libsqlite3-dev. Imported only by ShoalStore.
#include <sqlite3.h>

// SQLITE_TRANSIENT is a macro that casts -1 to a function pointer; Swift cannot import it.
static inline sqlite3_destructor_type shoal_sqlite_transient(void) { return SQLITE_TRANSIENT; }

// Turns off SQLite's memory statistics, which take a global mutex on every allocation and free
// (about a hundred per replicated document). Shoal never reads them. Must run before SQLite
// initializes (the first connection); later it returns SQLITE_MISUSE and changes nothing.
static inline int shoal_sqlite_disable_memstatus(void) { return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); }
