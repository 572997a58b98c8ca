// Package shared finds the read-only ../shared folder (golden data, sample
// images, docs) that sits beside the repository checkout, for tests and for the
// bundled demo.
package shared

import (
	"errors"
	"os"
	"path/filepath"
)

// Dir returns $LINGBOTMAP_SHARED, or the "shared" folder beside the directory
// that holds go.mod, searching upwards from the working directory.
func Dir() (string, error) {
	if d := os.Getenv("LINGBOTMAP_SHARED"); d != "" {
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			s := filepath.Join(filepath.Dir(d), "shared")
			if _, err := os.Stat(filepath.Join(s, "golden")); err == nil {
				return s, nil
			}
			return "", errors.New("no ../shared folder beside the repository (set LINGBOTMAP_SHARED)")
		}
		if filepath.Dir(d) == d {
			return "", errors.New("not inside the repository (no go.mod found)")
		}
	}
}

// Path joins elements under Dir.
func Path(elem ...string) (string, error) {
	d, err := Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(append([]string{d}, elem...)...), nil
}
