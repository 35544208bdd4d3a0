package host

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/epbuild/epbuild/builder/check"
)

// Pair is one GPU and the NICs nearest to it in the PCIe tree.
type Pair struct {
	// GPU is the CUDA device index, assuming CUDA_DEVICE_ORDER=PCI_BUS_ID order (and no
	// CUDA_VISIBLE_DEVICES): GPUs sorted by PCI address.
	GPU     int      `json:"gpu"`
	PCI     string   `json:"pci"`
	NUMA    int      `json:"numa"`
	Nearest []string `json:"nearest"` // every NIC at the closest distance, natural order
	// Via is the deepest common PCIe ancestor of the GPU and its nearest NICs (a switch
	// port's address, a root complex, or "" when they share none).
	Via  string `json:"via"`
	HCA  string `json:"hca"` // the NIC chosen for this GPU: distinct where the topology allows
	Port int    `json:"port"`
}

// Report is every host check's result, plus the GPU↔NIC pairing they computed.
type Report struct {
	Checks []check.Result `json:"checks"`
	Pairs  []Pair         `json:"pairs,omitempty"`
}

// Failed reports whether any check failed.
func (r Report) Failed() bool { return check.Failed(r.Checks) }

// Check returns the check with the given id, and whether it is there.
func (r Report) Check(id string) (check.Result, bool) { return check.Find(r.Checks, id) }

// MappingValue is the DEEP_EP_DEVICE_TO_HCA_MAPPING value the PCIe pairing implies
// ("0:mlx5_0:1,1:mlx5_1:1,..."), or "" when no GPU was paired.
func (r Report) MappingValue() string {
	parts := make([]string, 0, len(r.Pairs))
	for _, p := range r.Pairs {
		if p.HCA == "" {
			return ""
		}
		parts = append(parts, fmt.Sprintf("%d:%s:%d", p.GPU, p.HCA, p.Port))
	}
	return strings.Join(parts, ",")
}

// HCAList is the NVSHMEM_HCA_LIST value for the process that drives CUDA device gpu
// ("mlx5_3:1"), which is what DeepEP PR #466 sets from the mapping; "" when unknown.
func (r Report) HCAList(gpu int) string {
	for _, p := range r.Pairs {
		if p.GPU == gpu && p.HCA != "" {
			return fmt.Sprintf("%s:%d", p.HCA, p.Port)
		}
	}
	return ""
}

// MappingLine is the env.sh line for the pairing
// ("export DEEP_EP_DEVICE_TO_HCA_MAPPING=0:mlx5_0:1,..."), or "" when there is none.
func MappingLine(r Report) string {
	v := r.MappingValue()
	if v == "" {
		return ""
	}
	return "export DEEP_EP_DEVICE_TO_HCA_MAPPING=" + v
}

// WriteTable writes the report as an aligned text table: id, status, what was read, fix.
func WriteTable(w io.Writer, r Report) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tREAD\tFIX")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.ID, c.Status, clip(oneLine(c.Read), maxTableRead), oneLine(c.Fix))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write host check table: %w", err)
	}
	return nil
}

// maxTableRead keeps a table row readable; the whole text is in the JSON report.
const maxTableRead = 160

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// oneLine keeps a table row on one line; multi-line reads are joined with "; ".
func oneLine(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ; ")), " ")
}
