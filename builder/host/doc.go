// Package host checks that a node is fit to run DeepEP + NVSHMEM: RDMA devices, GPU↔NIC
// pairing from the PCIe tree, gdrdrv, locked memory, NCCL version, free GPU memory,
// distinct hostnames across a job's nodes and NIC traffic spread; and it reads the facts
// the compatibility rules judge a node by (peer memory and dma-buf, the driver's regkeys,
// RoCE GIDs, the bootstrap interface, nvcc, IMEX channels, ...). Every read of /sys, /proc
// and /dev, and every program run (nvidia-smi, scontrol), goes through a sysroot.Root, so
// the same checks run against the real root or against a capture.
//
// It owns the checks, the node's facts and what a capture must hold (Capture). It may not
// read the host around builder/host/sysroot, which owns the reading, the record and the
// capture's format; nor does it know builds, installs or recipes: the caller hands it a
// Config and prints its report.
package host
