package host

import "os"

// The fixture nodes come from hostfixture; these are what their recipes ask of them.

// gcpB200Config is what the gcp-b200 recipe's runtime environment asks.
func gcpB200Config() Config {
	return Config{
		Recipe: "gcp-b200", Transport: TransportIBGDA, GIDIndex: 3, HCAPrefix: "mlx5",
		Mapping:          "0:mlx5_0:1,1:mlx5_1:1,2:mlx5_2:1,3:mlx5_3:1,4:mlx5_4:1,5:mlx5_5:1,6:mlx5_6:1,7:mlx5_7:1",
		NVSHMEMVersion:   "3.5.19-1",
		NCCLBuildVersion: "2.27.3-1", NCCLRuntimeVersion: "2.27.3",
	}
}

func awsP5Config() Config {
	return Config{Recipe: "efa-aws", Transport: TransportEFA, GIDIndex: -1, NeedGDRCopy: true, NVSHMEMVersion: "3.4.5-0"}
}

func removeAll(p string) error { return os.RemoveAll(p) }
