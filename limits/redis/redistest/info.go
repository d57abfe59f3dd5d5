package redistest

import (
	"strconv"
	"strings"
)

// Info is what a server has done so far, from INFO all: its CPU seconds
// (used_cpu_user + used_cpu_sys) and, per command (INFO's cmdstat_ names
// without the prefix), its calls and microseconds. Benchmarks take two
// and subtract, for a command's or a line's cost in Redis.
type Info struct {
	CPUSeconds float64
	Calls      map[string]float64
	Usec       map[string]float64
}

// Info reads s's INFO all.
func (s *Server) Info() (Info, error) {
	v, err := s.Do("INFO", "all")
	if err != nil {
		return Info{}, err
	}
	in := Info{Calls: map[string]float64{}, Usec: map[string]float64{}}
	text, _ := v.(string)
	for _, line := range strings.Split(text, "\r\n") {
		k, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, _ := strconv.ParseFloat(val, 64)
			in.CPUSeconds += f
			continue
		}
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(val, ",") {
			field, fv, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseFloat(fv, 64)
			switch field {
			case "calls":
				in.Calls[name] = n
			case "usec":
				in.Usec[name] = n
			}
		}
	}
	return in, nil
}
