/* Runs SQLite's speedtest1 (its main renamed speedtest1_main by tests/speedtest1/build.sh)
 * after loading the nvme VFS extension named by $NVME_SQLITE_EXT (crates/sqlite-ext,
 * libnvme_sqlite.so), with URI file names on, so `speedtest1 --vfs nvme
 * 'file:speed.db?vfs=nvme&device=BDF&nsid=2&format=ifblank'` runs on a namespace. Without
 * $NVME_SQLITE_EXT it is plain speedtest1 (the default VFS). */
#include <stdio.h>
#include <stdlib.h>
#include <sqlite3.h>

int speedtest1_main(int argc, char **argv);

int main(int argc, char **argv) {
    const char *ext = getenv("NVME_SQLITE_EXT");
    if (ext && *ext) {
        sqlite3 *db = NULL;
        char *err = NULL;
        if (sqlite3_config(SQLITE_CONFIG_URI, 1) != SQLITE_OK) {
            fprintf(stderr, "load-nvme: SQLITE_CONFIG_URI refused\n");
            return 1;
        }
        if (sqlite3_open(":memory:", &db) != SQLITE_OK ||
            sqlite3_enable_load_extension(db, 1) != SQLITE_OK ||
            sqlite3_load_extension(db, ext, NULL, &err) != SQLITE_OK) {
            fprintf(stderr, "load-nvme: loading %s failed: %s\n", ext,
                    err ? err : sqlite3_errmsg(db));
            return 1;
        }
        sqlite3_close(db);
    }
    return speedtest1_main(argc, argv);
}
