package source

import (
	"net/url"
	"path"
	"regexp"
	"strings"
)

// scpLike matches git's scp-style address, user@host:path.
var scpLike = regexp.MustCompile(`^(?:[^@/]+@)?([^:/]+):(.+)$`)

// RepoKey maps a git URL to its place in the cache and in a mirror, host/path.git:
// https://github.com/deepseek-ai/DeepEP and …/DeepEP.git both give
// github.com/deepseek-ai/DeepEP.git. file:///srv/x gives file/srv/x.git.
func RepoKey(rawURL string) (string, error) {
	host, p, err := splitURL(rawURL, true)
	if err != nil {
		return "", err
	}
	p = strings.TrimSuffix(p, ".git")
	if p == "" {
		return "", badPin(nil, "git URL %q: no repository path", rawURL)
	}
	return host + "/" + p + ".git", nil
}

// ArchiveKey maps an archive URL to its place in a mirror, host/path.
func ArchiveKey(rawURL string) (string, error) {
	host, p, err := splitURL(rawURL, false)
	if err != nil {
		return "", err
	}
	if p == "" {
		return "", badPin(nil, "archive URL %q: no file path", rawURL)
	}
	return host + "/" + p, nil
}

func splitURL(rawURL string, git bool) (host, p string, err error) {
	if git && !strings.Contains(rawURL, "://") {
		if m := scpLike.FindStringSubmatch(rawURL); m != nil {
			host, p = m[1], m[2]
			return cleanKey(rawURL, strings.ToLower(host), p)
		}
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", "", badPin(err, "source URL %q", rawURL)
	}
	switch u.Scheme {
	case "http", "https":
	case "ssh", "git", "file":
		if !git {
			return "", "", badPin(nil, "archive URL %q: only http and https archives are fetched", rawURL)
		}
	default:
		return "", "", badPin(nil, "source URL %q: unsupported scheme %q", rawURL, u.Scheme)
	}
	host = strings.ToLower(u.Host)
	if u.Scheme == "file" {
		host = "file"
	}
	if host == "" {
		return "", "", badPin(nil, "source URL %q: no host", rawURL)
	}
	return cleanKey(rawURL, host, u.Path)
}

// cleanKey refuses paths that would climb out of the mirror or cache directory.
func cleanKey(rawURL, host, p string) (string, string, error) {
	if strings.ContainsAny(host, `/\`) || host == "." || host == ".." {
		return "", "", badPin(nil, "source URL %q: bad host %q", rawURL, host)
	}
	p = strings.Trim(p, "/")
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." || seg == "." || (seg == "" && p != "") || strings.Contains(seg, `\`) {
			return "", "", badPin(nil, "source URL %q: path %q is not clean", rawURL, p)
		}
	}
	return host, path.Clean("/" + p)[1:], nil
}
