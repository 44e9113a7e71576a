// Package volspec reads the volume specs `claimd volume register` and
// `claimd volume create` take, in JSON or in HCL, with sizes in bytes or
// with a unit ("10GiB", "500M") wherever a capacity is given.
//
// Both forms end as the same JSON shape, which is then decoded strictly
// into the API's types: HCL is mapped onto it key by key (capability
// blocks become "capabilities", blocks of free keys become string maps,
// topology_request takes Nomad's required/preferred, topology, segments
// nesting), and a size string becomes its number of bytes. Errors name
// the file, the line (in HCL) and the key.
package volspec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/claimd/claimd/structs"
)

// ReadRegister reads a register spec: one volume, or in JSON also an
// array of volumes. name is the file name errors give (and whose ending
// says the format: .hcl, .json, or else by its first character).
func ReadRegister(name string, data []byte) ([]*structs.Volume, error) {
	js, err := toJSON(name, data, registerFields, true)
	if err != nil {
		return nil, err
	}
	var vols []*structs.Volume
	if len(js) > 0 && js[0] == '[' {
		err = strictJSON(js).Decode(&vols)
	} else {
		var v structs.Volume
		err = strictJSON(js).Decode(&v)
		vols = []*structs.Volume{&v}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if err := checkExternalIDs(name, vols); err != nil {
		return nil, err
	}
	return vols, nil
}

// checkExternalIDs refuses, before anything is sent, an external ID the
// servers would refuse (structs.ValidateExternalID: the plugin is given
// it, so "../", control characters and overlong IDs are not allowed),
// naming the file and, in a list, the volume. A missing one is left to the
// servers' "must not be empty", as before.
func checkExternalIDs(name string, vols []*structs.Volume) error {
	for i, v := range vols {
		if v == nil || v.ExternalID == "" {
			continue
		}
		field := "external_id"
		if len(vols) > 1 {
			field = fmt.Sprintf("[%d].external_id", i)
		}
		if err := structs.ValidateExternalID(field, v.ExternalID); err != nil {
			return fmt.Errorf("%s: %v", name, err)
		}
	}
	return nil
}

// ReadCreate reads one create spec.
func ReadCreate(name string, data []byte) (*structs.VolumeCreateSpec, error) {
	js, err := toJSON(name, data, createFields, false)
	if err != nil {
		return nil, err
	}
	var spec structs.VolumeCreateSpec
	if err := strictJSON(js).Decode(&spec); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	return &spec, nil
}

// isHCL says which form data is: by the name's ending, else JSON when it
// starts with { or [.
func isHCL(name string, data []byte) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".hcl":
		return true
	case ".json":
		return false
	}
	t := bytes.TrimSpace(data)
	return len(t) == 0 || (t[0] != '{' && t[0] != '[')
}

func toJSON(name string, data []byte, fields []field, register bool) ([]byte, error) {
	if isHCL(name, data) {
		return hclToJSON(name, data, fields, register)
	}
	return sizesInJSON(name, bytes.TrimSpace(data), fields)
}

// strictJSON decodes refusing unknown fields, naming them.
func strictJSON(data []byte) *json.Decoder {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec
}

// sizesInJSON turns size strings at the spec's size keys into numbers,
// in one volume or in each of an array's.
func sizesInJSON(name string, data []byte, fields []field) ([]byte, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%s: empty", name)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	objs := []any{doc}
	list, isList := doc.([]any)
	if isList {
		objs = list
	}
	for i, o := range objs {
		m, ok := o.(map[string]any)
		if !ok {
			continue // the strict decode says what is wrong
		}
		for _, f := range fields {
			s, ok := m[f.name].(string)
			if f.kind != kindSize || !ok {
				continue
			}
			n, err := ParseSize(s)
			if err != nil {
				where := name
				if isList {
					where = fmt.Sprintf("%s: [%d]", name, i)
				}
				return nil, fmt.Errorf("%s: %s: %v", where, f.name, err)
			}
			m[f.name] = n
		}
	}
	return json.Marshal(doc)
}

// sizeUnits are the suffixes ParseSize accepts, longest first so "GiB"
// is not read as "B".
var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
}

// ParseSize reads a size in bytes: a plain number, or one with a unit
// (KiB, MiB, GiB, TiB in powers of 1024, KB, MB, GB, TB in powers of 1000;
// K, M, G, T are the binary ones, as Nomad reads them).
func ParseSize(s string) (int64, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a positive size (bytes, or a number with KiB, MiB, GiB, TiB, KB, MB, GB or TB)", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * mult, nil
}
