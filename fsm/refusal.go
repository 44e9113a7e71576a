package fsm

import (
	"errors"
	"fmt"

	"github.com/claimd/claimd/structs"
)

// itemError says which item of a request a refusal is about while keeping
// the error a *structs.CodedError whose message starts with its code: net/rpc
// flattens errors to strings, and structs.ParseError finds the code only at
// the front.
func itemError(field string, i int, err error) error {
	var ce *structs.CodedError
	if !errors.As(err, &ce) {
		ce = structs.NewError(structs.CodeInvalid, err.Error())
	}
	return structs.NewError(ce.Code, fmt.Sprintf("%s[%d]: %s", field, i, ce.Message))
}
