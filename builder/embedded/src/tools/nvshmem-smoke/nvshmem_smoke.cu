// epbuild's NVSHMEM smoke test: what a DeepEP job does with NVSHMEM before its
// first kernel, on this node, with the NVSHMEM the artifact's DeepEP links.
//
// One process per PE. Rank 0 makes the unique ID and writes it to a file (the
// out-of-band channel; DeepEP uses torch.distributed), every rank reads it and
// initialises with NVSHMEMX_INIT_WITH_UNIQUEID, allocates symmetric memory,
// puts to the next PE from the device, waits at a barrier and checks what the
// previous PE put, then splits NVSHMEM_TEAM_WORLD the way DeepEP's runtime.cu
// does (strided, one team per local GPU index). Each step prints one line:
//
//   STEP <rank> <name> <ok|fail|skip> <milliseconds> <detail>
//
// and the process ends with "DONE <rank> <failed steps>". Steps: uid, bootstrap,
// init, version, malloc, put, barrier, split. A failing step stops the rank
// (later steps cannot run without it); epbuild names that step and its fix.
// Every wait has a deadline (--timeout, seconds) so a rank never hangs: a
// bootstrap that cannot reach rank 0 (a wrong NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME)
// ends as a failed step, not a stuck job.

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nvshmem.h>
#include <nvshmemx.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

int g_rank = -1;
const char* g_step = "start";

double now_ms() {
    using namespace std::chrono;
    return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

void step(const char* name, const char* status, double ms, const char* fmt, ...) __attribute__((format(printf, 4, 5)));
void step(const char* name, const char* status, double ms, const char* fmt, ...) {
    char detail[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    for (char* p = detail; *p; ++p)
        if (*p == '\n')
            *p = ' ';
    printf("STEP %d %s %s %.1f %s\n", g_rank, name, status, ms, detail);
    fflush(stdout);
}

[[noreturn]] void fail(const char* name, double ms, const char* why) {
    step(name, "fail", ms, "%s", why);
    printf("DONE %d 1\n", g_rank);
    fflush(stdout);
    _exit(1);
}

// The deadline: a rank stuck inside NVSHMEM (a bootstrap that never connects, a
// barrier a peer never reaches) reports the step it was in and exits.
void on_alarm(int) {
    char line[256];
    int n = snprintf(line, sizeof(line), "STEP %d %s fail 0 timed out in this step\nDONE %d 1\n", g_rank, g_step, g_rank);
    if (write(1, line, n) < 0) {
    }
    _exit(1);
}

bool write_file_atomic(const std::string& path, const void* data, size_t n) {
    const std::string tmp = path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "wb");
    if (!f)
        return false;
    const bool ok = fwrite(data, 1, n, f) == n && fflush(f) == 0 && fsync(fileno(f)) == 0;
    fclose(f);
    return ok && rename(tmp.c_str(), path.c_str()) == 0;
}

bool read_file_wait(const std::string& path, void* data, size_t n, double deadline_ms) {
    for (;;) {
        struct stat st;
        if (stat(path.c_str(), &st) == 0 && static_cast<size_t>(st.st_size) == n) {
            FILE* f = fopen(path.c_str(), "rb");
            if (f) {
                const bool ok = fread(data, 1, n, f) == n;
                fclose(f);
                if (ok)
                    return true;
            }
        }
        if (now_ms() > deadline_ms)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

// Each PE writes its rank into the next PE's slot and a pattern into the next
// PE's buffer, from the device, then completes its puts.
__global__ void k_put(int* slot, int* buf, int words, int me, int npes) {
    const int next = (me + 1) % npes;
    for (int i = threadIdx.x; i < words; i += blockDim.x)
        buf[words + i] = me * 1000003 + i;  // the source half
    __syncthreads();
    if (threadIdx.x == 0) {
        nvshmem_int_put(buf, buf + words, words, next);
        nvshmem_fence();
        nvshmem_int_p(slot, me, next);
        nvshmem_quiet();
    }
}

__global__ void k_check(const int* slot, const int* buf, int words, int prev, int* bad) {
    if (threadIdx.x == 0 && *slot != prev)
        atomicAdd(bad, 1 << 20);
    for (int i = threadIdx.x; i < words; i += blockDim.x)
        if (buf[i] != prev * 1000003 + i)
            atomicAdd(bad, 1);
}

void usage(const char* argv0) {
    fprintf(stderr,
            "usage: %s --rank R --npes N --uid-file FILE [--local-pes L] [--device D] [--timeout S] [--words W]\n"
            "       %s --devices   (prints the number of CUDA devices)\n",
            argv0, argv0);
}

}  // namespace

int main(int argc, char** argv) {
    int rank = -1, npes = 0, local = 0, device = -1, timeout_s = 120, words = 1 << 18;
    std::string uid_file;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--devices") {
            int n = 0;
            if (cudaGetDeviceCount(&n) != cudaSuccess)
                n = 0;
            printf("%d\n", n);
            return 0;
        }
        if (i + 1 >= argc) {
            usage(argv[0]);
            return 2;
        }
        const char* v = argv[++i];
        if (a == "--rank")
            rank = atoi(v);
        else if (a == "--npes")
            npes = atoi(v);
        else if (a == "--local-pes")
            local = atoi(v);
        else if (a == "--device")
            device = atoi(v);
        else if (a == "--timeout")
            timeout_s = atoi(v);
        else if (a == "--words")
            words = atoi(v);
        else if (a == "--uid-file")
            uid_file = v;
        else {
            usage(argv[0]);
            return 2;
        }
    }
    if (rank < 0 || npes <= 0 || rank >= npes || uid_file.empty() || timeout_s <= 0 || words <= 0) {
        usage(argv[0]);
        return 2;
    }
    if (local <= 0)
        local = npes;
    g_rank = rank;
    signal(SIGALRM, on_alarm);
    alarm(static_cast<unsigned>(timeout_s));
    const double deadline = now_ms() + 1000.0 * timeout_s;

    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0)
        fail("uid", 0, "no CUDA device visible to this process (CUDA_VISIBLE_DEVICES, driver)");
    if (device < 0)
        device = (rank % local) % ndev;
    if (cudaSetDevice(device) != cudaSuccess)
        fail("uid", 0, "cudaSetDevice failed");

    // uid: rank 0 makes the unique ID; the others receive it out of band.
    g_step = "uid";
    double t = now_ms();
    nvshmemx_uniqueid_t uid = NVSHMEMX_UNIQUEID_INITIALIZER;
    if (rank == 0) {
        if (nvshmemx_get_uniqueid(&uid) != 0)
            fail("uid", now_ms() - t, "nvshmemx_get_uniqueid failed: the bootstrap found no usable interface");
        if (!write_file_atomic(uid_file, &uid, sizeof(uid)))
            fail("uid", now_ms() - t, "cannot write the unique-id file");
        step("uid", "ok", now_ms() - t, "made and published (%zu bytes)", sizeof(uid));
    } else {
        if (!read_file_wait(uid_file, &uid, sizeof(uid), deadline))
            fail("uid", now_ms() - t, "no unique id from rank 0 before the deadline");
        step("uid", "ok", now_ms() - t, "received from rank 0");
    }

    // bootstrap + init: every rank by unique ID, as DeepEP's internode::init.
    g_step = "init";
    t = now_ms();
    nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
    if (nvshmemx_set_attr_uniqueid_args(rank, npes, &uid, &attr) != 0)
        fail("bootstrap", now_ms() - t, "nvshmemx_set_attr_uniqueid_args failed");
    if (nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr) != 0)
        fail("init", now_ms() - t, "nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID) failed");
    const double init_ms = now_ms() - t;
    const int me = nvshmem_my_pe(), n = nvshmem_n_pes();
    if (me != rank || n != npes) {
        char why[128];
        snprintf(why, sizeof(why), "NVSHMEM says pe %d of %d, expected %d of %d", me, n, rank, npes);
        fail("init", init_ms, why);
    }
    step("init", "ok", init_ms, "pe %d of %d on device %d", me, n, device);

    // version: the library this process loaded, against the headers it was built with.
    int maj = 0, min = 0, pat = 0;
    nvshmemx_vendor_get_version_info(&maj, &min, &pat);
    Dl_info info;
    const char* lib = "?";
    if (dladdr(reinterpret_cast<void*>(&nvshmemx_vendor_get_version_info), &info) && info.dli_fname)
        lib = info.dli_fname;
    step("version", "ok", 0, "loaded=%d.%d.%d built=%d.%d.%d lib=%s", maj, min, pat, NVSHMEM_VENDOR_MAJOR_VERSION,
         NVSHMEM_VENDOR_MINOR_VERSION, NVSHMEM_VENDOR_PATCH_VERSION, lib);

    // malloc: symmetric memory (a slot and a buffer whose second half is the source).
    g_step = "malloc";
    t = now_ms();
    int* slot = static_cast<int*>(nvshmem_malloc(sizeof(int)));
    int* buf = static_cast<int*>(nvshmem_malloc(2 * static_cast<size_t>(words) * sizeof(int)));
    if (!slot || !buf)
        fail("malloc", now_ms() - t, "nvshmem_malloc returned NULL: the symmetric heap is smaller than asked (NVSHMEM_SYMMETRIC_SIZE)");
    if (cudaMemset(slot, 0xff, sizeof(int)) != cudaSuccess || cudaMemset(buf, 0, 2 * static_cast<size_t>(words) * sizeof(int)) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess)
        fail("malloc", now_ms() - t, "cudaMemset of the symmetric allocation failed");
    nvshmem_barrier_all();
    step("malloc", "ok", now_ms() - t, "%zu bytes", sizeof(int) + 2 * static_cast<size_t>(words) * sizeof(int));

    // put: to the next PE from the device, then a barrier, then check what the previous PE put.
    g_step = "put";
    t = now_ms();
    k_put<<<1, 256>>>(slot, buf, words, me, n);
    if (cudaDeviceSynchronize() != cudaSuccess)
        fail("put", now_ms() - t, cudaGetErrorString(cudaGetLastError()));
    const double put_ms = now_ms() - t;
    g_step = "barrier";
    t = now_ms();
    nvshmem_barrier_all();
    step("barrier", "ok", now_ms() - t, "nvshmem_barrier_all");
    int* bad = nullptr;
    int nbad = -1;
    if (cudaMalloc(&bad, sizeof(int)) != cudaSuccess || cudaMemset(bad, 0, sizeof(int)) != cudaSuccess)
        fail("put", put_ms, "cudaMalloc for the check failed");
    k_check<<<1, 256>>>(slot, buf, words, (me + n - 1) % n, bad);
    if (cudaMemcpy(&nbad, bad, sizeof(int), cudaMemcpyDeviceToHost) != cudaSuccess)
        fail("put", put_ms, "reading the check back failed");
    if (nbad != 0) {
        char why[160];
        snprintf(why, sizeof(why), "data from pe %d wrong: %d words differ%s", (me + n - 1) % n, nbad & ((1 << 20) - 1),
                 nbad >> 20 ? ", flag missing" : "");
        fail("put", put_ms, why);
    }
    step("put", "ok", put_ms, "%d words and a flag to pe %d, received from pe %d", words, (me + 1) % n, (me + n - 1) % n);

    // split: DeepEP's RDMA team, one per local GPU index (start = pe % local, stride = local).
    g_step = "split";
    t = now_ms();
    if (n % local != 0) {
        step("split", "skip", 0, "%d PEs are not a multiple of %d local PEs", n, local);
    } else if (local > ndev) {
        // several PEs share a GPU: NVSHMEM refuses team creation in such "limited MPG"
        // runs (team.cu: "Called NVSHMEM API not supported with limited MPG") and exits
        step("split", "skip", 0, "%d local PEs share %d GPU(s): NVSHMEM does not split teams with several PEs per GPU", local, ndev);
    } else {
        nvshmem_team_config_t cfg;
        memset(&cfg, 0, sizeof(cfg));
        nvshmem_team_t team = NVSHMEM_TEAM_INVALID;
        const int rc = nvshmem_team_split_strided(NVSHMEM_TEAM_WORLD, me % local, local, n / local, &cfg, 0, &team);
        if (rc != 0 || team == NVSHMEM_TEAM_INVALID) {
            char why[160];
            snprintf(why, sizeof(why), "nvshmem_team_split_strided(start=%d, stride=%d, size=%d) returned %d", me % local, local,
                     n / local, rc);
            fail("split", now_ms() - t, why);
        }
        const int tsize = nvshmem_team_n_pes(team);
        nvshmem_team_destroy(team);
        step("split", "ok", now_ms() - t, "team of %d (start %d, stride %d)", tsize, me % local, local);
    }

    nvshmem_barrier_all();
    nvshmem_free(buf);
    nvshmem_free(slot);
    nvshmem_finalize();
    alarm(0);
    printf("DONE %d 0\n", rank);
    return 0;
}
