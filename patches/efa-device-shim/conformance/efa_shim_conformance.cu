// Conformance test for the EFA device shim (csrc/kernels/efa_device_shim.cuh of
// the efa-device-shim patch set). Two PEs, one process each, NVSHMEM started with
// the unique-id bootstrap; the id travels through a file (--uid-file).
//
// Every shim function is called across the two PEs and its effect checked on the
// receiving PE. Each PE prints "PASS <name> pe=<n>" or "FAIL <name> pe=<n>: why"
// for what it received, then "SUMMARY pe=<n> passed=<p> failed=<f>"; the exit
// status is 1 when anything failed.
//
// Paths: the load/store path is what DeepEP does itself with the pointer from
// nvshmemi_get_p2p_ptr (tests p2p.*); every other test goes through the shim's
// NVSHMEM calls. Run with NVSHMEM_DISABLE_P2P=1 (and --expect-p2p no) to make
// NVSHMEM carry those over its proxy and remote transport instead of NVLink;
// that needs a NIC with a working NVSHMEM remote transport (EFA: libfabric).
// Built with -DEFA_DEVICE_SHIM_NO_P2P_SHORTCUT, the shim's test switch, the
// peer pointer must be 0 (what DeepEP then sees on NVLink peers too).

#define EFA_DEVICE_SHIM_STANDALONE 1
#define EFA_DEVICE_SHIM_DEFINE_STATE 1  // this test is the only translation unit
#include "efa_device_shim.cuh"

#include <cuda_runtime.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

constexpr size_t kRegionBytes = 4u << 20;  // src and dst regions, each
constexpr int kNumInts = 4096;
constexpr int kNumU64 = 64;
constexpr unsigned long long kTimeoutNs = 20ull * 1000 * 1000 * 1000;
#ifdef EFA_DEVICE_SHIM_NO_P2P_SHORTCUT
constexpr bool kNoShortcut = true;  // the shim's test switch: get_p2p_ptr returns 0 for peers
#else
constexpr bool kNoShortcut = false;
#endif

int g_pe = -1;

#define CUDA_CHECK(call)                                                                                                     \
    do {                                                                                                                     \
        cudaError_t err_ = (call);                                                                                           \
        if (err_ != cudaSuccess) {                                                                                           \
            fprintf(stderr, "pe %d: %s failed at %s:%d: %s\n", g_pe, #call, __FILE__, __LINE__, cudaGetErrorString(err_)); \
            exit(3);                                                                                                         \
        }                                                                                                                    \
    } while (0)

__host__ __device__ __forceinline__ uint32_t pattern_word(int pe, int tag, size_t idx) {
    uint32_t x = static_cast<uint32_t>(idx) * 2654435761u;
    x ^= static_cast<uint32_t>(pe + 1) * 0x9E3779B9u;
    x ^= static_cast<uint32_t>(tag + 1) * 0x85EBCA6Bu;
    x ^= x >> 15;
    return x;
}

__device__ __forceinline__ uint64_t now_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ int ld_acquire_sys(const int* p) {
    int v;
    asm volatile("ld.acquire.sys.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ unsigned long long ld_acquire_sys_u64(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.acquire.sys.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ uint32_t ld_volatile_u32(const uint32_t* p) {
    return *reinterpret_cast<const volatile uint32_t*>(p);
}

// ---------------------------------------------------------------------------
// Kernels

// Interface: the shim's functions have DeepEP's signatures (checked in the device
// pass) and the state fields DeepEP reads.
__global__ void k_state(long long* out) {
#ifdef __CUDA_ARCH__
    static_assert(std::is_same<decltype(&deep_ep::nvshmemi_get_p2p_ptr), uint64_t (*)(const uint64_t&, const int&, const int&)>::value,
                  "nvshmemi_get_p2p_ptr signature");
    static_assert(std::is_same<decltype(&deep_ep::nvshmemi_ibgda_put_nbi_warp<true>),
                               void (*)(uint64_t, uint64_t, size_t, int, int, int, int)>::value,
                  "nvshmemi_ibgda_put_nbi_warp<true> signature");
    static_assert(std::is_same<decltype(&deep_ep::nvshmemi_ibgda_put_nbi_warp<false>),
                               void (*)(uint64_t, uint64_t, size_t, int, int, int, int)>::value,
                  "nvshmemi_ibgda_put_nbi_warp<false> signature");
    static_assert(std::is_same<decltype(&deep_ep::nvshmemi_ibgda_amo_nonfetch_add), void (*)(void*, const int&, int, int, bool)>::value,
                  "nvshmemi_ibgda_amo_nonfetch_add signature");
    static_assert(std::is_same<decltype(&deep_ep::nvshmemi_ibgda_rma_p), void (*)(int*, int, int, int, uint32_t)>::value,
                  "nvshmemi_ibgda_rma_p signature");
    static_assert(std::is_same<decltype(&deep_ep::nvshmemi_ibgda_quiet), void (*)(int, int)>::value, "nvshmemi_ibgda_quiet signature");
    static_assert(std::is_same<decltype(deep_ep::ibgda_get_state()->num_rc_per_pe), uint32_t>::value, "num_rc_per_pe type");
    static_assert(std::is_same<decltype(deep_ep::ibgda_get_state()->num_devices_initialized), int>::value,
                  "num_devices_initialized type");
#endif
    if (threadIdx.x == 0) {
        // The expression DeepEP uses for its QP loops.
        auto qps_per_rank = deep_ep::ibgda_get_state()->num_rc_per_pe * deep_ep::ibgda_get_state()->num_devices_initialized;
        out[0] = deep_ep::ibgda_get_state()->num_rc_per_pe;
        out[1] = deep_ep::ibgda_get_state()->num_devices_initialized;
        out[2] = qps_per_rank;
    }
}

constexpr int kNumP2POffsets = 5;

__global__ void k_p2p_ptr(uint8_t* dst, int me, int peer, unsigned long long* out) {
    if (threadIdx.x != 0)
        return;
    const uint64_t base = reinterpret_cast<uint64_t>(dst);
    out[0] = deep_ep::nvshmemi_get_p2p_ptr(base, me, me);
    out[1] = deep_ep::nvshmemi_get_p2p_ptr(base, me, peer);
    out[2] = reinterpret_cast<unsigned long long>(nvshmem_ptr(dst, peer));
    const uint64_t offsets[kNumP2POffsets] = {4, 64, 4096, (1u << 20) + 12, kRegionBytes - 4};
    for (int i = 0; i < kNumP2POffsets; ++i)
        out[3 + i] = deep_ep::nvshmemi_get_p2p_ptr(base + offsets[i], me, peer);
}

// DeepEP's own load/store path: write through the peer pointer the shim returned.
__global__ void k_p2p_store(uint8_t* dst, int me, int peer, size_t bytes, int tag) {
    const auto p = deep_ep::nvshmemi_get_p2p_ptr(reinterpret_cast<uint64_t>(dst), me, peer);
    if (p == 0)
        return;
    auto* w = reinterpret_cast<uint32_t*>(p);
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < bytes / 4; i += static_cast<size_t>(gridDim.x) * blockDim.x)
        w[i] = pattern_word(me, tag, i);
    __threadfence_system();
}

__global__ void k_fill(uint8_t* p, size_t bytes, int pe, int tag) {
    auto* w = reinterpret_cast<uint32_t*>(p);
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < bytes / 4; i += static_cast<size_t>(gridDim.x) * blockDim.x)
        w[i] = pattern_word(pe, tag, i);
}

constexpr int kMaxSlices = 8;
struct Slices {
    int n;
    unsigned long long off[kMaxSlices];
    unsigned long long size[kMaxSlices];
};

// One warp per slice; odd warps use kAlwaysDoPostSend = true, even ones the default.
__global__ void k_put_slices(uint8_t* dst, const uint8_t* src, Slices s, int peer) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp < s.n) {
        const auto r = reinterpret_cast<uint64_t>(dst + s.off[warp]);
        const auto l = reinterpret_cast<uint64_t>(src + s.off[warp]);
        if (warp & 1)
            deep_ep::nvshmemi_ibgda_put_nbi_warp<true>(r, l, s.size[warp], peer, warp, lane, warp);
        else
            deep_ep::nvshmemi_ibgda_put_nbi_warp(r, l, s.size[warp], peer, warp, lane, warp);
    }
    __syncthreads();
    if (threadIdx.x == 0)
        deep_ep::nvshmemi_ibgda_quiet(peer, 0);
}

enum Signal { kSignalAmoInt = 0, kSignalAmoU64 = 1, kSignalRmaP = 2 };

struct StreamArgs {
    uint8_t* src;
    uint8_t* dst;
    int* ints;
    unsigned long long* u64;
    int me, peer, rounds, signal;
    size_t chunk;
    int* res;  // [0] data mismatches, [1] timeouts
};

constexpr int kStreamChannels = 4;
constexpr int kSignalIntBase = 0;   // ints[c]: amo int counters
constexpr int kSignalFlagBase = 16; // ints[16 + c]: rma_p flags
constexpr int kSignalU64Base = 0;   // u64[c]: amo into 64-bit counters

// DeepEP's sender pattern: a warp puts a chunk, then one lane announces it with an
// atomic (tail counter) or a 4-byte put (flag); the receiving warp waits for the
// announcement and must then find the whole chunk in place.
__global__ void k_stream(StreamArgs a) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp < kStreamChannels) {
        const int c = warp;
        for (int r = 0; r < a.rounds; ++r) {
            const size_t off = (static_cast<size_t>(c) * a.rounds + r) * a.chunk;
            auto* s = reinterpret_cast<uint32_t*>(a.src + off);
            for (size_t i = lane; i < a.chunk / 4; i += 32)
                s[i] = pattern_word(a.me, 100 + r, off / 4 + i);
            __syncwarp();
            deep_ep::nvshmemi_ibgda_put_nbi_warp<true>(
                reinterpret_cast<uint64_t>(a.dst + off), reinterpret_cast<uint64_t>(a.src + off), a.chunk, a.peer, c, lane, 0);
            if (lane == 0) {
                if (a.signal == kSignalAmoInt)
                    deep_ep::nvshmemi_ibgda_amo_nonfetch_add(a.ints + kSignalIntBase + c, 1, a.peer, c);
                else if (a.signal == kSignalAmoU64)
                    deep_ep::nvshmemi_ibgda_amo_nonfetch_add(a.u64 + kSignalU64Base + c, 1, a.peer, c, false);
                else
                    deep_ep::nvshmemi_ibgda_rma_p(a.ints + kSignalFlagBase + c, r + 1, a.peer, c);
            }
            __syncwarp();
        }
    } else if (warp < 2 * kStreamChannels) {
        const int c = warp - kStreamChannels;
        for (int r = 0; r < a.rounds; ++r) {
            int timed_out = 0;
            if (lane == 0) {
                const uint64_t t0 = now_ns();
                while (true) {
                    int seen;
                    if (a.signal == kSignalAmoU64)
                        seen = static_cast<int>(ld_acquire_sys_u64(a.u64 + kSignalU64Base + c));  // as DeepEP reads its tail
                    else if (a.signal == kSignalAmoInt)
                        seen = ld_acquire_sys(a.ints + kSignalIntBase + c);
                    else
                        seen = ld_acquire_sys(a.ints + kSignalFlagBase + c);
                    if (seen >= r + 1)
                        break;
                    if (now_ns() - t0 > kTimeoutNs) {
                        timed_out = 1;
                        break;
                    }
                }
            }
            timed_out = __shfl_sync(0xffffffff, timed_out, 0);
            if (timed_out) {
                if (lane == 0)
                    atomicAdd(a.res + 1, 1);
                break;
            }
            const size_t off = (static_cast<size_t>(c) * a.rounds + r) * a.chunk;
            const auto* d = reinterpret_cast<const uint32_t*>(a.dst + off);
            int bad = 0;
            for (size_t i = lane; i < a.chunk / 4; i += 32)
                bad += ld_volatile_u32(d + i) != pattern_word(a.peer, 100 + r, off / 4 + i);
            if (bad)
                atomicAdd(a.res, bad);
        }
    }
}

constexpr int kAmoSumIdx = 32;       // ints[32]: remote add target, ints[33]: sentinel
constexpr int kAmoU64Idx = 8;        // u64[8]: remote 32-bit add into a 64-bit word
constexpr int kLocalU64Idx = 9;      // u64[9], u64[10]: local-copy adds
constexpr int kAmoThreads = 128;
constexpr int kAmoU64Adders = 8;
constexpr int kAmoU64Add = 3;

__host__ __device__ inline int amo_value(int t) {
    return (t % 11) - 5;  // -5..5, negatives included (DeepEP sends -num_tokens - 1)
}

__global__ void k_amo(int* ints, unsigned long long* u64, int peer) {
    const int t = threadIdx.x;
    deep_ep::nvshmemi_ibgda_amo_nonfetch_add(ints + kAmoSumIdx, amo_value(t), peer, t / 32);
    const int add = kAmoU64Add;  // a local: the shim takes the value by reference
    if (t < kAmoU64Adders)
        deep_ep::nvshmemi_ibgda_amo_nonfetch_add(u64 + kAmoU64Idx, add, peer, t);
    __syncthreads();
    if (t == 0)
        deep_ep::nvshmemi_ibgda_quiet(peer, 1);
}

// is_local_copy: a 64-bit atomicAdd on this GPU's own memory, as in DeepEP.
__global__ void k_amo_local(unsigned long long* u64, int me, unsigned long long* out) {
    const int t = threadIdx.x;
    if (t == 0) {
        deep_ep::nvshmemi_ibgda_amo_nonfetch_add(u64 + kLocalU64Idx, 1, me, 0, true);
        out[0] = *reinterpret_cast<volatile unsigned long long*>(u64 + kLocalU64Idx);
        deep_ep::nvshmemi_ibgda_amo_nonfetch_add(u64 + kLocalU64Idx, -2, me, 0, true);
        out[1] = *reinterpret_cast<volatile unsigned long long*>(u64 + kLocalU64Idx);
    }
    __syncthreads();
    deep_ep::nvshmemi_ibgda_amo_nonfetch_add(u64 + kLocalU64Idx + 1, 1, me, t % 4, true);
}

constexpr int kRmaPIdx = 64;   // ints[64..95]
constexpr int kRmaPImmIdx = 96;

__global__ void k_rma_p(int* ints, int me, int peer) {
    const int lane = threadIdx.x;
    deep_ep::nvshmemi_ibgda_rma_p(ints + kRmaPIdx + lane, me * 1000 + lane, peer, lane);
    if (lane == 0)
        deep_ep::nvshmemi_ibgda_rma_p(ints + kRmaPImmIdx, 777 + me, peer, 0, 0xffffffffu);
    __syncwarp();
    if (lane == 0)
        deep_ep::nvshmemi_ibgda_quiet(peer, 3);
}

constexpr int kQuietFlagIdx = 128;

// Quiet: put a large buffer, quiet (one call on another QP id, or DeepEP's loop over
// every (peer, QP)), then raise a flag with a plain nvshmem_int_p (no fence): only
// the quiet orders the data before the flag. Then wait for the peer's flag and
// check its data.
__global__ void k_quiet(uint8_t* src, uint8_t* dst, int* ints, int me, int npes, int peer, size_t bytes, int loop_mode, int tag,
                        int* res, unsigned long long* cycles) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp == 0) {
        auto* s = reinterpret_cast<uint32_t*>(src);
        for (size_t i = lane; i < bytes / 4; i += 32)
            s[i] = pattern_word(me, tag, i);
        __syncwarp();
        deep_ep::nvshmemi_ibgda_put_nbi_warp(reinterpret_cast<uint64_t>(dst), reinterpret_cast<uint64_t>(src), bytes, peer, 0, lane, 0);
    }
    __syncthreads();
    const auto t0 = clock64();
    if (loop_mode == 0) {
        if (threadIdx.x == 0)
            deep_ep::nvshmemi_ibgda_quiet(peer, 5);
    } else {
        const auto qps_per_rank = deep_ep::ibgda_get_state()->num_rc_per_pe * deep_ep::ibgda_get_state()->num_devices_initialized;
        for (int i = threadIdx.x; i < qps_per_rank * (npes - 1); i += blockDim.x) {
            const auto dst_rank = (me + 1 + i / qps_per_rank) % npes;
            const auto qp_id = i % qps_per_rank;
            deep_ep::nvshmemi_ibgda_quiet(dst_rank, qp_id);
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        *cycles = static_cast<unsigned long long>(clock64() - t0);
        nvshmem_int_p(ints + kQuietFlagIdx, tag, peer);
    }
    if (warp == 0) {
        int timed_out = 0;
        if (lane == 0) {
            const uint64_t start = now_ns();
            while (ld_acquire_sys(ints + kQuietFlagIdx) != tag) {
                if (now_ns() - start > kTimeoutNs) {
                    timed_out = 1;
                    break;
                }
            }
        }
        timed_out = __shfl_sync(0xffffffff, timed_out, 0);
        if (timed_out) {
            if (lane == 0)
                atomicAdd(res + 1, 1);
            return;
        }
        const auto* d = reinterpret_cast<const uint32_t*>(dst);
        int bad = 0;
        for (size_t i = lane; i < bytes / 4; i += 32)
            bad += ld_volatile_u32(d + i) != pattern_word(peer, tag, i);
        if (bad)
            atomicAdd(res, bad);
    }
}

// ---------------------------------------------------------------------------
// Host side

struct Ctx {
    int pe = -1, npes = 0, peer = -1;
    bool expect_p2p = true;
    uint8_t* src = nullptr;
    uint8_t* dst = nullptr;
    int* ints = nullptr;
    unsigned long long* u64 = nullptr;
    int* res = nullptr;                 // device scratch: counters written by kernels
    unsigned long long* out = nullptr;  // device scratch: values written by kernels
    int passed = 0, failed = 0;
};

void report(Ctx& c, const std::string& name, bool ok, const std::string& why = std::string()) {
    if (ok) {
        printf("PASS %s pe=%d%s%s\n", name.c_str(), c.pe, why.empty() ? "" : " ", why.c_str());
        ++c.passed;
    } else {
        printf("FAIL %s pe=%d: %s\n", name.c_str(), c.pe, why.c_str());
        ++c.failed;
    }
    fflush(stdout);
}

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof(buf), f, ap);
    va_end(ap);
    return buf;
}

// Every kernel of both PEs finished and every NVSHMEM operation complete.
void sync_all() {
    CUDA_CHECK(cudaDeviceSynchronize());
    nvshmem_barrier_all();
    CUDA_CHECK(cudaDeviceSynchronize());
}

void reset(Ctx& c) {
    CUDA_CHECK(cudaMemset(c.src, 0, kRegionBytes));
    CUDA_CHECK(cudaMemset(c.dst, 0, kRegionBytes));
    CUDA_CHECK(cudaMemset(c.ints, 0, kNumInts * sizeof(int)));
    CUDA_CHECK(cudaMemset(c.u64, 0, kNumU64 * sizeof(unsigned long long)));
    CUDA_CHECK(cudaMemset(c.res, 0, 64 * sizeof(int)));
    CUDA_CHECK(cudaMemset(c.out, 0, 64 * sizeof(unsigned long long)));
    sync_all();
}

std::vector<uint32_t> read_words(const uint8_t* dev, size_t bytes) {
    std::vector<uint32_t> h(bytes / 4);
    CUDA_CHECK(cudaMemcpy(h.data(), dev, bytes, cudaMemcpyDeviceToHost));
    return h;
}

template <typename T>
T read_one(const T* dev) {
    T v;
    CUDA_CHECK(cudaMemcpy(&v, dev, sizeof(T), cudaMemcpyDeviceToHost));
    return v;
}

template <typename T>
void write_one(T* dev, T v) {
    CUDA_CHECK(cudaMemcpy(dev, &v, sizeof(T), cudaMemcpyHostToDevice));
}

// Reads the shim state as DeepEP's kernels see it: num_rc_per_pe,
// num_devices_initialized and their product (DeepEP's qps_per_rank).
void read_state(Ctx& c, long long v[3]) {
    k_state<<<1, 32>>>(reinterpret_cast<long long*>(c.out));
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(v, c.out, 3 * sizeof(long long), cudaMemcpyDeviceToHost));
}

// Sets NVSHMEM_IBGDA_NUM_RC_PER_PE (nullptr: unset), copies it into the device
// state as DeepEP's runtime.cu does after NVSHMEM init, and reads the state back.
void state_with(Ctx& c, const char* value, long long v[3]) {
    if (value)
        setenv("NVSHMEM_IBGDA_NUM_RC_PER_PE", value, 1);
    else
        unsetenv("NVSHMEM_IBGDA_NUM_RC_PER_PE");
    CUDA_CHECK(deep_ep::efa_device_shim_sync_state());
    read_state(c, v);
}

void test_state(Ctx& c) {
    const char* given = getenv("NVSHMEM_IBGDA_NUM_RC_PER_PE");
    const std::string saved = given ? given : "";
    long long v[3];
    // Before the sync (as before NVSHMEM init): the compile-time default.
    read_state(c, v);
    report(c, "state.default", v[0] == EFA_DEVICE_SHIM_NUM_RC_PER_PE && v[1] == 1 && v[2] == v[0] * v[1],
           fmt("num_rc_per_pe=%lld num_devices_initialized=%lld qps_per_rank=%lld", v[0], v[1], v[2]));
    // DeepEP's low-latency Buffer with 288 local experts (one GPU, 288 experts)
    // sets NVSHMEM_IBGDA_NUM_RC_PER_PE=288 and asserts num_rc_per_pe >= 288.
    state_with(c, "288", v);
    report(c, "state.follows_num_rc_per_pe", v[0] == 288 && v[1] == 1 && v[2] == 288,
           fmt("NVSHMEM_IBGDA_NUM_RC_PER_PE=288: num_rc_per_pe=%lld qps_per_rank=%lld", v[0], v[2]));
    // Normal mode: DeepEP asks for num_channels (here 12) and asserts equality.
    state_with(c, "12", v);
    report(c, "state.follows_small", v[0] == 12, fmt("NVSHMEM_IBGDA_NUM_RC_PER_PE=12: num_rc_per_pe=%lld", v[0]));
    // Not a positive number, or unset: the default, never 0 (DeepEP divides by it).
    bool ok = true;
    std::string seen;
    for (const char* bad : {"0", "-4", "abc", "12x", ""}) {
        state_with(c, bad, v);
        ok = ok && v[0] == EFA_DEVICE_SHIM_NUM_RC_PER_PE;
        seen += fmt(" '%s'->%lld", bad, v[0]);
    }
    state_with(c, nullptr, v);
    ok = ok && v[0] == EFA_DEVICE_SHIM_NUM_RC_PER_PE;
    seen += fmt(" unset->%lld", v[0]);
    report(c, "state.bad_value_default", ok, seen.c_str());
    // Back to what this process was started with, for the tests after this one.
    state_with(c, given ? saved.c_str() : nullptr, v);
}

void test_p2p(Ctx& c) {
    reset(c);
    k_p2p_ptr<<<1, 32>>>(c.dst, c.pe, c.peer, c.out);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    unsigned long long v[3 + kNumP2POffsets];
    CUDA_CHECK(cudaMemcpy(v, c.out, sizeof(v), cudaMemcpyDeviceToHost));
    const auto base = reinterpret_cast<unsigned long long>(c.dst);
    report(c, "get_p2p_ptr.self", v[0] == base, fmt("got %#llx want %#llx", v[0], base));
    if (kNoShortcut) {
        report(c, "get_p2p_ptr.no_shortcut", v[1] == 0, fmt("peer %d -> %#llx (want 0; nvshmem_ptr %#llx)", c.peer, v[1], v[2]));
    } else {
        report(c, "get_p2p_ptr.matches_nvshmem_ptr", v[1] == v[2], fmt("shim %#llx nvshmem_ptr %#llx", v[1], v[2]));
        if (c.expect_p2p)
            report(c, "get_p2p_ptr.peer_nonnull", v[1] != 0, fmt("peer %d -> %#llx", c.peer, v[1]));
        else
            report(c, "get_p2p_ptr.peer_null", v[1] == 0, fmt("peer %d -> %#llx (want 0: not load/store reachable)", c.peer, v[1]));
    }
    const unsigned long long offsets[kNumP2POffsets] = {4, 64, 4096, (1u << 20) + 12, kRegionBytes - 4};
    bool arith = true;
    std::string why;
    for (int i = 0; i < kNumP2POffsets; ++i) {
        const unsigned long long want = v[1] == 0 ? 0 : v[1] + offsets[i];
        if (v[3 + i] != want) {
            arith = false;
            why += fmt("offset %llu: got %#llx want %#llx; ", offsets[i], v[3 + i], want);
        }
    }
    report(c, "get_p2p_ptr.offsets", arith, why);

    // The load/store path itself: write the peer's dst through the pointer, check ours.
    if (!c.expect_p2p || kNoShortcut) {
        printf("SKIP p2p.store pe=%d: no load/store peer pointer in this mode\n", c.pe);
        return;
    }
    const size_t bytes = (1u << 20) + 64;
    CUDA_CHECK(cudaMemset(c.dst, 0xEE, kRegionBytes));
    sync_all();
    k_p2p_store<<<64, 256>>>(c.dst, c.pe, c.peer, bytes, 3);
    CUDA_CHECK(cudaGetLastError());
    sync_all();
    const auto h = read_words(c.dst, kRegionBytes);
    size_t bad = 0, first = SIZE_MAX;
    for (size_t i = 0; i < h.size(); ++i) {
        const uint32_t want = i < bytes / 4 ? pattern_word(c.peer, 3, i) : 0xEEEEEEEEu;
        if (h[i] != want) {
            ++bad;
            if (first == SIZE_MAX)
                first = i;
        }
    }
    report(c, "p2p.store", bad == 0, fmt("%zu bad words, first at word %zd", bad, first == SIZE_MAX ? -1 : (ssize_t)first));
}

void test_put_slices(Ctx& c) {
    reset(c);
    Slices s{};
    const unsigned long long sizes[] = {0, 4, 72, 4096, 65552, 3u << 20};
    s.n = sizeof(sizes) / sizeof(sizes[0]);
    unsigned long long off = 256;
    for (int i = 0; i < s.n; ++i) {
        s.off[i] = off;
        s.size[i] = sizes[i];
        off = (off + sizes[i] + 256 + 255) / 256 * 256;
    }
    if (off > kRegionBytes) {
        report(c, "put_nbi_warp.sizes", false, "slices do not fit the region");
        return;
    }
    k_fill<<<256, 256>>>(c.src, kRegionBytes, c.pe, 4);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemset(c.dst, 0xEE, kRegionBytes));
    sync_all();
    k_put_slices<<<1, 32 * s.n>>>(c.dst, c.src, s, c.peer);
    CUDA_CHECK(cudaGetLastError());
    sync_all();
    const auto h = read_words(c.dst, kRegionBytes);
    std::vector<char> covered(h.size(), 0);
    std::string why;
    bool ok = true;
    for (int i = 0; i < s.n; ++i) {
        size_t bad = 0;
        for (size_t w = s.off[i] / 4; w < (s.off[i] + s.size[i]) / 4; ++w) {
            covered[w] = 1;
            bad += h[w] != pattern_word(c.peer, 4, w);
        }
        if (bad) {
            ok = false;
            why += fmt("slice %d (%llu bytes, %s): %zu bad words; ", i, s.size[i], (i & 1) ? "<true>" : "<default>", bad);
        }
    }
    size_t stray = 0;
    for (size_t w = 0; w < h.size(); ++w)
        stray += !covered[w] && h[w] != 0xEEEEEEEEu;
    if (stray) {
        ok = false;
        why += fmt("%zu words written outside the slices (size-0 slice included)", stray);
    }
    report(c, "put_nbi_warp.sizes", ok, ok ? "sizes 0,4,72,4096,65552,3MiB" : why);
}

void test_stream(Ctx& c, int signal, const char* name) {
    reset(c);
    const int rounds = 32;
    const size_t chunk = 32u << 10;  // 4 channels x 32 rounds x 32 KiB = the 4 MiB region
    const unsigned long long hi = 7ull << 32;
    if (signal == kSignalAmoU64) {
        for (int ch = 0; ch < kStreamChannels; ++ch)
            write_one(c.u64 + kSignalU64Base + ch, hi);
    }
    sync_all();
    StreamArgs a{c.src, c.dst, c.ints, c.u64, c.pe, c.peer, rounds, signal, chunk, c.res};
    k_stream<<<1, 64 * kStreamChannels>>>(a);
    CUDA_CHECK(cudaGetLastError());
    sync_all();
    int res[2];
    CUDA_CHECK(cudaMemcpy(res, c.res, sizeof(res), cudaMemcpyDeviceToHost));
    std::string why = fmt("%d bad words after the signal, %d timeouts", res[0], res[1]);
    bool ok = res[0] == 0 && res[1] == 0;
    for (int ch = 0; ch < kStreamChannels; ++ch) {
        if (signal == kSignalAmoU64) {
            const auto v = read_one(c.u64 + kSignalU64Base + ch);
            if (v != hi + rounds) {
                ok = false;
                why += fmt("; u64 counter %d = %#llx, want %#llx (32-bit add into the low word)", ch, v, hi + rounds);
            }
        } else {
            const int idx = signal == kSignalAmoInt ? kSignalIntBase + ch : kSignalFlagBase + ch;
            const int v = read_one(c.ints + idx);
            if (v != rounds) {
                ok = false;
                why += fmt("; signal %d = %d, want %d", ch, v, rounds);
            }
        }
    }
    report(c, name, ok, why);
}

void test_amo(Ctx& c) {
    reset(c);
    const unsigned long long u64_init = (1ull << 32) | 5ull;
    write_one(c.ints + kAmoSumIdx + 1, 0x5A5A5A5A);
    write_one(c.u64 + kAmoU64Idx, u64_init);
    sync_all();
    k_amo<<<1, kAmoThreads>>>(c.ints, c.u64, c.peer);
    CUDA_CHECK(cudaGetLastError());
    sync_all();
    int want = 0;
    for (int t = 0; t < kAmoThreads; ++t)
        want += amo_value(t);
    const int got = read_one(c.ints + kAmoSumIdx);
    const int sentinel = read_one(c.ints + kAmoSumIdx + 1);
    report(c, "amo_nonfetch_add.sum", got == want, fmt("got %d want %d (%d adders, values -5..5)", got, want, kAmoThreads));
    report(c, "amo_nonfetch_add.width32", sentinel == 0x5A5A5A5A, fmt("next int %#x want 0x5a5a5a5a", sentinel));
    const auto u = read_one(c.u64 + kAmoU64Idx);
    const unsigned long long uwant = u64_init + kAmoU64Adders * kAmoU64Add;
    report(c, "amo_nonfetch_add.into_u64_low_word", u == uwant, fmt("got %#llx want %#llx", u, uwant));

    // Local copy (no peer involved).
    write_one(c.u64 + kLocalU64Idx, 0xFFFFFFFFull);
    write_one(c.u64 + kLocalU64Idx + 1, 0xFFFFFFF0ull);
    k_amo_local<<<1, 64>>>(c.u64, c.pe, c.out);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    unsigned long long o[2];
    CUDA_CHECK(cudaMemcpy(o, c.out, sizeof(o), cudaMemcpyDeviceToHost));
    const auto many = read_one(c.u64 + kLocalU64Idx + 1);
    const bool lok = o[0] == 0x100000000ull && o[1] == 0xFFFFFFFEull && many == 0xFFFFFFF0ull + 64;
    report(c, "amo_nonfetch_add.local_copy_64bit", lok,
           fmt("+1 -> %#llx (want 0x100000000), -2 -> %#llx (want 0xfffffffe), 64x+1 -> %#llx (want %#llx)", o[0], o[1], many,
               0xFFFFFFF0ull + 64));
    sync_all();
}

void test_rma_p(Ctx& c) {
    reset(c);
    k_rma_p<<<1, 32>>>(c.ints, c.pe, c.peer);
    CUDA_CHECK(cudaGetLastError());
    sync_all();
    std::vector<int> h(kNumInts);
    CUDA_CHECK(cudaMemcpy(h.data(), c.ints, kNumInts * sizeof(int), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int l = 0; l < 32; ++l)
        bad += h[kRmaPIdx + l] != c.peer * 1000 + l;
    bad += h[kRmaPImmIdx] != 777 + c.peer;
    int stray = 0;
    for (int i = 0; i < kNumInts; ++i)
        stray += (i < kRmaPIdx || i > kRmaPImmIdx) && h[i] != 0;
    report(c, "rma_p.values", bad == 0 && stray == 0, fmt("%d wrong values, %d stray writes", bad, stray));
}

void test_quiet(Ctx& c, int loop_mode) {
    reset(c);
    const int tag = loop_mode ? 0x5151 : 0x5150;
    k_quiet<<<1, 256>>>(c.src, c.dst, c.ints, c.pe, c.npes, c.peer, kRegionBytes, loop_mode, tag, c.res, c.out);
    CUDA_CHECK(cudaGetLastError());
    sync_all();
    int res[2];
    CUDA_CHECK(cudaMemcpy(res, c.res, sizeof(res), cudaMemcpyDeviceToHost));
    const auto cycles = read_one(c.out);
    report(c, loop_mode ? "quiet.deepep_loop" : "quiet.other_qp", res[0] == 0 && res[1] == 0,
           fmt("4 MiB put, then %s, then a plain p flag: %d bad words, %d timeouts, quiet took %llu cycles",
               loop_mode ? "quiet for every (peer, QP)" : "one quiet(peer, qp 5)", res[0], res[1], cycles));
}

// Unique-id exchange through a file: PE 0 writes it (atomically, by rename), PE 1 waits for it.
bool exchange_uid(int rank, const std::string& path, nvshmemx_uniqueid_t* uid) {
    if (rank == 0) {
        if (nvshmemx_get_uniqueid(uid) != 0) {
            fprintf(stderr, "pe 0: nvshmemx_get_uniqueid failed\n");
            return false;
        }
        const std::string tmp = path + ".tmp";
        FILE* f = fopen(tmp.c_str(), "wb");
        if (!f || fwrite(uid, sizeof(*uid), 1, f) != 1 || fclose(f) != 0) {
            fprintf(stderr, "pe 0: cannot write %s\n", tmp.c_str());
            return false;
        }
        if (rename(tmp.c_str(), path.c_str()) != 0) {
            fprintf(stderr, "pe 0: cannot rename %s\n", tmp.c_str());
            return false;
        }
        return true;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
        FILE* f = fopen(path.c_str(), "rb");
        if (f) {
            const size_t n = fread(uid, sizeof(*uid), 1, f);
            fclose(f);
            if (n == 1)
                return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    fprintf(stderr, "pe %d: no unique id in %s after 120 s\n", rank, path.c_str());
    return false;
}

bool env_true(const char* name) {
    const char* v = getenv(name);
    if (!v)
        return false;
    const std::string s(v);
    return s == "1" || s == "y" || s == "Y" || s == "yes" || s == "YES" || s == "true" || s == "TRUE" || s == "on" || s == "ON";
}

void usage(const char* argv0) {
    fprintf(stderr,
            "usage: %s --rank R --uid-file PATH [--nranks 2] [--device D] [--expect-p2p yes|no|auto]\n"
            "  --expect-p2p auto (default): yes unless NVSHMEM_DISABLE_P2P is set true\n",
            argv0);
}

}  // namespace

int main(int argc, char** argv) {
    int rank = -1, nranks = 2, device = -1;
    std::string uid_file, expect = "auto";
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> const char* {
            if (i + 1 >= argc) {
                usage(argv[0]);
                exit(2);
            }
            return argv[++i];
        };
        if (a == "--rank")
            rank = atoi(next());
        else if (a == "--nranks")
            nranks = atoi(next());
        else if (a == "--device")
            device = atoi(next());
        else if (a == "--uid-file")
            uid_file = next();
        else if (a == "--expect-p2p")
            expect = next();
        else {
            usage(argv[0]);
            return 2;
        }
    }
    if (rank < 0 || uid_file.empty() || nranks != 2 || (expect != "yes" && expect != "no" && expect != "auto")) {
        usage(argv[0]);
        return 2;
    }
    g_pe = rank;
    int ndev = 0;
    CUDA_CHECK(cudaGetDeviceCount(&ndev));
    if (device < 0)
        device = rank % ndev;
    CUDA_CHECK(cudaSetDevice(device));

    nvshmemx_uniqueid_t uid = NVSHMEMX_UNIQUEID_INITIALIZER;
    if (!exchange_uid(rank, uid_file, &uid))
        return 2;
    nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
    if (nvshmemx_set_attr_uniqueid_args(rank, nranks, &uid, &attr) != 0) {
        fprintf(stderr, "pe %d: nvshmemx_set_attr_uniqueid_args failed\n", rank);
        return 2;
    }
    if (nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr) != 0) {
        fprintf(stderr, "pe %d: nvshmemx_init_attr failed\n", rank);
        return 2;
    }

    Ctx c;
    c.pe = nvshmem_my_pe();
    c.npes = nvshmem_n_pes();
    c.peer = (c.pe + 1) % c.npes;
    c.expect_p2p = expect == "yes" || (expect == "auto" && !env_true("NVSHMEM_DISABLE_P2P"));
    CUDA_CHECK(deep_ep::efa_device_shim_sync_state());  // as DeepEP's runtime.cu does after init
    printf("INFO pe=%d npes=%d device=%d expect_p2p=%s no_p2p_shortcut=%s num_rc_per_pe=%u (default %d)\n", c.pe, c.npes, device,
           c.expect_p2p ? "yes" : "no", kNoShortcut ? "yes" : "no", deep_ep::efa_device_shim_num_rc_per_pe(), EFA_DEVICE_SHIM_NUM_RC_PER_PE);

    c.src = static_cast<uint8_t*>(nvshmem_malloc(kRegionBytes));
    c.dst = static_cast<uint8_t*>(nvshmem_malloc(kRegionBytes));
    c.ints = static_cast<int*>(nvshmem_malloc(kNumInts * sizeof(int)));
    c.u64 = static_cast<unsigned long long*>(nvshmem_malloc(kNumU64 * sizeof(unsigned long long)));
    if (!c.src || !c.dst || !c.ints || !c.u64) {
        fprintf(stderr, "pe %d: nvshmem_malloc failed\n", c.pe);
        return 2;
    }
    CUDA_CHECK(cudaMalloc(&c.res, 64 * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&c.out, 64 * sizeof(unsigned long long)));

    test_state(c);
    test_p2p(c);
    test_put_slices(c);
    test_stream(c, kSignalAmoInt, "put_then_amo.int_counter");
    test_stream(c, kSignalAmoU64, "put_then_amo.u64_tail");
    test_stream(c, kSignalRmaP, "put_then_rma_p.flag");
    test_amo(c);
    test_rma_p(c);
    test_quiet(c, 0);
    test_quiet(c, 1);

    sync_all();
    CUDA_CHECK(cudaFree(c.res));
    CUDA_CHECK(cudaFree(c.out));
    nvshmem_free(c.u64);
    nvshmem_free(c.ints);
    nvshmem_free(c.dst);
    nvshmem_free(c.src);
    nvshmem_finalize();
    printf("SUMMARY pe=%d passed=%d failed=%d\n", c.pe, c.passed, c.failed);
    return c.failed ? 1 : 0;
}
