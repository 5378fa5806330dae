/* eddy/pmi.h - the PMI-1 C API (libpmi.so.0), spoken over the PMI-1 simple
 * wire protocol that eddy-shell serves to every task.
 *
 * This is the de-facto standard process management interface of MPICH2,
 * as described by Flux RFC 13: function names, signatures and return
 * codes are the standard ones, so a program written against any PMI-1
 * pmi.h links against this library unchanged.  It is installed as
 * LIBDIR/eddy/libpmi.so.0 so that it never shadows another manager's
 * libpmi; point LD_LIBRARY_PATH (or the link line) there.
 *
 * Lifecycle:
 *  1. PMI_Init() reads the environment eddy-shell sets for each task:
 *     PMI_FD (the inherited connection), PMI_RANK, PMI_SIZE and
 *     PMI_SPAWNED (optional, "0" or "1", default 0).  It then does the
 *     init handshake (PMI version 1.1) and asks for the maximum lengths,
 *     the application number and the KVS name, so that the getters below
 *     answer locally, without a round trip.
 *     Without PMI_FD the process runs as a *singleton*: size 1, rank 0,
 *     appnum 0, and a private in-process KVS (puts are visible to its own
 *     gets at once; the barrier returns at once).  A missing PMI_FD with
 *     PMI_SIZE set to more than 1 is an error, not a singleton, because a
 *     rank of a parallel job that lost its connection must not silently
 *     run alone.
 *  2. PMI_KVS_Put() sends each pair to the server; PMI_KVS_Commit() is a
 *     local no-op (puts are never buffered); PMI_Barrier() waits until
 *     every process of the job has entered it, after which every pair put
 *     before the barrier anywhere is visible to PMI_KVS_Get().
 *  3. PMI_Finalize() says goodbye to the server and closes PMI_FD.  The
 *     library cannot be initialised again afterwards in the same process.
 *  PMI_Abort() asks the server to end the whole job with an exit code and
 *  never returns.
 *
 * Conventions:
 *  - Every function returns PMI_SUCCESS (0) or one of the PMI_ERR_* codes
 *    or PMI_FAIL; output arguments are written only on success.
 *  - A NULL pointer argument gives PMI_ERR_INVALID_ARG; a call other than
 *    PMI_Init()/PMI_Initialized() before a successful PMI_Init() gives
 *    PMI_ERR_INIT.
 *  - Any wire failure (server error answer, malformed or overlong answer,
 *    connection closed) gives PMI_FAIL; no call ever hangs on a server
 *    that has gone away.  A server that stays connected but never answers
 *    (e.g. a barrier some rank never enters, or a job held at its
 *    `--stop=init` barrier) blocks the call: that is the protocol.
 *  - Nothing is printed unless PMI_DEBUG is set (to anything) in the
 *    environment; then every wire line and every failure is traced on
 *    stderr.  In particular PMI_Abort() hands its message to the server,
 *    which reports it, instead of printing it.
 *  - The library keeps one static connection state and is NOT thread-safe:
 *    PMI-1 allows one request in flight per connection, so a program must
 *    call it from one thread at a time.
 *  - The optional dynamic-process functions (spawn, name publishing, extra
 *    KVS spaces, option parsing) are defined, as RFC 13 asks, and return
 *    PMI_FAIL with no effect.
 */
#ifndef EDDY_PMI_H
#define EDDY_PMI_H

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes (values as in MPICH's pmi.h and RFC 13). */
#define PMI_SUCCESS 0
#define PMI_FAIL -1
#define PMI_ERR_INIT 1
#define PMI_ERR_NOMEM 2
#define PMI_ERR_INVALID_ARG 3
#define PMI_ERR_INVALID_KEY 4
#define PMI_ERR_INVALID_KEY_LENGTH 5
#define PMI_ERR_INVALID_VAL 6
#define PMI_ERR_INVALID_VAL_LENGTH 7
#define PMI_ERR_INVALID_LENGTH 8
#define PMI_ERR_INVALID_NUM_ARGS 9
#define PMI_ERR_INVALID_ARGS 10
#define PMI_ERR_INVALID_NUM_PARSED 11
#define PMI_ERR_INVALID_KEYVALP 12
#define PMI_ERR_INVALID_SIZE 13

/* Booleans of older pmi.h versions, kept for source compatibility. */
typedef int PMI_BOOL;
#define PMI_TRUE 1
#define PMI_FALSE 0

/* A key/value pair for the (unsupported) spawn and option functions. */
typedef struct PMI_keyval_t {
    const char *key;
    char *val;
} PMI_keyval_t;

/* --- initialisation ------------------------------------------------------ */

/* Initialise the library (see the lifecycle above) and set *spawned to 1 if
 * this process was created by PMI_Spawn_multiple() (PMI_SPAWNED=1), else 0.
 * PMI_ERR_INVALID_ARG: spawned is NULL.
 * PMI_FAIL: already initialised; PMI_FD, PMI_RANK, PMI_SIZE or PMI_SPAWNED
 * missing or malformed (PMI_FD not an open descriptor, a rank outside
 * 0..size-1, trailing junk); the handshake failed or the server answered
 * with an error, a version other than 1, or a malformed line. */
int PMI_Init(int *spawned);

/* Set *initialized to 1 if PMI_Init() succeeded and PMI_Finalize() was not
 * called since, else 0.  Works at any time.
 * PMI_ERR_INVALID_ARG: initialized is NULL. */
int PMI_Initialized(int *initialized);

/* Tell the server this process is done with PMI, wait for its answer and
 * close PMI_FD.  The library is uninitialised afterwards even on failure.
 * PMI_ERR_INIT: not initialised.  PMI_FAIL: the server did not acknowledge
 * (the descriptor is closed anyway). */
int PMI_Finalize(void);

/* Ask the server to end the whole job with exit_code, reporting error_msg
 * (may be NULL; control characters are sent as spaces, and a message too
 * long for one wire line is cut), then wait up to 2 seconds for the server
 * to end this process and _exit(exit_code) if it has not.  Never returns.
 * A singleton, or a process that never initialised, just exits with
 * exit_code. */
int PMI_Abort(int exit_code, const char error_msg[]);

/* --- process group information ------------------------------------------- */

/* Size of the job (number of ranks).  PMI_ERR_INVALID_ARG, PMI_ERR_INIT. */
int PMI_Get_size(int *size);

/* This process's rank, 0..size-1.  PMI_ERR_INVALID_ARG, PMI_ERR_INIT. */
int PMI_Get_rank(int *rank);

/* The universe size (the largest the job may grow to, MPI-2 5.5.1), asked
 * of the server on first use and then remembered; 1 for a singleton.
 * PMI_ERR_INVALID_ARG, PMI_ERR_INIT, PMI_FAIL (server error). */
int PMI_Get_universe_size(int *size);

/* The application number (MPI_APPNUM: which command of an MPMD job this
 * process runs, from 0).  PMI_ERR_INVALID_ARG, PMI_ERR_INIT. */
int PMI_Get_appnum(int *appnum);

/* Number of ranks of the job on this node, computed from the
 * PMI_process_mapping key of the KVS (RFC 13); if that key is missing,
 * empty or unreadable, the clique is this process alone.
 * PMI_ERR_INVALID_ARG, PMI_ERR_INIT, PMI_FAIL (wire failure). */
int PMI_Get_clique_size(int *size);

/* Fill ranks[0..n-1] with the ranks of the job on this node, in increasing
 * order, where n is what PMI_Get_clique_size() gives.
 * PMI_ERR_INVALID_ARG: ranks is NULL.  PMI_ERR_INVALID_LENGTH: length is
 * smaller than the clique size.  PMI_ERR_INIT, PMI_FAIL. */
int PMI_Get_clique_ranks(int ranks[], int length);

/* --- key value store ----------------------------------------------------- */

/* The name of this job's KVS, copied into kvsname[length] with its NUL.
 * PMI_ERR_INVALID_ARG: kvsname is NULL.  PMI_ERR_INVALID_LENGTH: length is
 * too small for the name and its NUL.  PMI_ERR_INIT. */
int PMI_KVS_Get_my_name(char kvsname[], int length);

/* Maximum length, NUL included, of a KVS name, a key and a value: what the
 * server announced, lowered to the library's own limits if larger (so that
 * every request fits one bounded wire line).
 * PMI_ERR_INVALID_ARG, PMI_ERR_INIT. */
int PMI_KVS_Get_name_length_max(int *length);
int PMI_KVS_Get_key_length_max(int *length);
int PMI_KVS_Get_value_length_max(int *length);

/* Put key=value into the KVS named kvsname (which must be this job's).
 * Keys are 1 or more printable ASCII characters other than space and '=';
 * values are 0 or more characters from '!' to '~' (RFC 13).  A key must
 * not be put twice before a barrier.
 * PMI_ERR_INVALID_ARG: a NULL argument, or kvsname is not this job's.
 * PMI_ERR_INVALID_KEY, PMI_ERR_INVALID_KEY_LENGTH (empty or too long),
 * PMI_ERR_INVALID_VAL, PMI_ERR_INVALID_VAL_LENGTH (too long),
 * PMI_ERR_INIT, PMI_FAIL (the server refused it or the wire failed). */
int PMI_KVS_Put(const char kvsname[], const char key[], const char value[]);

/* Commit the puts made so far.  Puts are sent at once, so this only checks
 * its argument.  PMI_ERR_INVALID_ARG (NULL or not this job's KVS),
 * PMI_ERR_INIT. */
int PMI_KVS_Commit(const char kvsname[]);

/* Copy the value of key into value[length], NUL included.  A key of the
 * reserved PMI_ namespace that the server does not have reads as the empty
 * string (RFC 13); any other missing key is PMI_FAIL.
 * PMI_ERR_INVALID_ARG: a NULL argument or not this job's KVS.
 * PMI_ERR_INVALID_KEY, PMI_ERR_INVALID_KEY_LENGTH: as for PMI_KVS_Put().
 * PMI_ERR_INVALID_LENGTH: length < 1 or too small for the value.
 * PMI_ERR_INIT, PMI_FAIL. */
int PMI_KVS_Get(const char kvsname[],
                const char key[],
                char value[],
                int length);

/* Block until every process of the job has entered the barrier.
 * PMI_ERR_INIT, PMI_FAIL (server error or wire failure). */
int PMI_Barrier(void);

/* --- aliases kept by RFC 13 for older callers ------------------------------
 */

/* Same as PMI_KVS_Get_name_length_max(). */
int PMI_Get_id_length_max(int *length);
/* Same as PMI_KVS_Get_my_name(). */
int PMI_Get_id(char id_str[], int length);
/* Same as PMI_KVS_Get_my_name(). */
int PMI_Get_kvs_domain_id(char id_str[], int length);

/* --- optional functions: defined, not supported; all return PMI_FAIL -------
 */

int PMI_KVS_Create(char kvsname[], int length);
int PMI_KVS_Destroy(const char kvsname[]);
int PMI_KVS_Iter_first(
    const char kvsname[], char key[], int key_len, char val[], int val_len);
int PMI_KVS_Iter_next(
    const char kvsname[], char key[], int key_len, char val[], int val_len);
int PMI_Spawn_multiple(int count,
                       const char *cmds[],
                       const char **argvs[],
                       const int maxprocs[],
                       const int info_keyval_sizesp[],
                       const PMI_keyval_t *info_keyval_vectors[],
                       int preput_keyval_size,
                       const PMI_keyval_t preput_keyval_vector[],
                       int errors[]);
int PMI_Publish_name(const char service_name[], const char port[]);
int PMI_Unpublish_name(const char service_name[]);
int PMI_Lookup_name(const char service_name[], char port[]);
int PMI_Parse_option(int num_args,
                     char *args[],
                     int *num_parsed,
                     PMI_keyval_t **keyvalp,
                     int *size);
int PMI_Args_to_keyval(int *argcp,
                       char *((*argvp)[]),
                       PMI_keyval_t **keyvalp,
                       int *size);
int PMI_Free_keyvals(PMI_keyval_t keyvalp[], int size);
int PMI_Get_options(char *str, int *length);

#ifdef __cplusplus
}
#endif

#endif /* !EDDY_PMI_H */
