package hostdir

import (
	"fmt"
	"sort"
	"time"
)

// StorageAttach and StorageDetach change a volume's attachments the way a
// storage administrator's own tool would: on the storage, behind the
// CO's back. Tests use them to make claimd's record and the storage
// disagree (reconciliation, issue 27). They take the same lock the
// controller does, so they never interleave with a publish.

// StorageAttach records volumeID as attached to nodeID under root, as a
// single-node writer. An attachment already there stays as it is and the
// call fails: the tool adds attachments, it does not rewrite the CO's.
func StorageAttach(root, volumeID, nodeID string, readOnly bool) error {
	if !validID(volumeID) || nodeID == "" {
		return fmt.Errorf("hostdir: volume %q or node %q is not valid", volumeID, nodeID)
	}
	var present bool
	err := editAttachments(root, volumeID, func(a *attachments) {
		if _, present = a.Nodes[nodeID]; !present {
			a.Nodes[nodeID] = attachment{AccessMode: "SINGLE_NODE_WRITER", ReadOnly: readOnly, Since: time.Now().UTC()}
		}
	})
	if err == nil && present {
		err = fmt.Errorf("hostdir: volume %q is already attached to node %q", volumeID, nodeID)
	}
	return err
}

// StorageDetach removes volumeID's attachment to nodeID under root.
func StorageDetach(root, volumeID, nodeID string) error {
	if !validID(volumeID) {
		return fmt.Errorf("hostdir: volume %q is not valid", volumeID)
	}
	return editAttachments(root, volumeID, func(a *attachments) { delete(a.Nodes, nodeID) })
}

// StorageAttachments lists the nodes volumeID is attached to under root,
// as the storage records them (sorted).
func StorageAttachments(root, volumeID string) ([]string, error) {
	if !validID(volumeID) {
		return nil, fmt.Errorf("hostdir: volume %q is not valid", volumeID)
	}
	st := store{root: root}
	if err := st.init(); err != nil {
		return nil, err
	}
	unlock, err := st.lockAttachments()
	if err != nil {
		return nil, err
	}
	defer unlock()
	a, err := st.readAttachments(volumeID)
	if err != nil {
		return nil, err
	}
	nodes := make([]string, 0, len(a.Nodes))
	for n := range a.Nodes {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	return nodes, nil
}

func editAttachments(root, volumeID string, edit func(*attachments)) error {
	st := store{root: root}
	if err := st.init(); err != nil {
		return err
	}
	unlock, err := st.lockAttachments()
	if err != nil {
		return err
	}
	defer unlock()
	a, err := st.readAttachments(volumeID)
	if err != nil {
		return err
	}
	edit(a)
	return st.writeAttachments(volumeID, a)
}
