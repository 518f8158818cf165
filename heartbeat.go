package errand

import (
	"encoding/json"
	"fmt"
)

// decodeWorkerInfo decodes a heartbeat's data.
func decodeWorkerInfo(b []byte) (WorkerInfo, error) {
	var wi WorkerInfo
	if err := json.Unmarshal(b, &wi); err != nil {
		return WorkerInfo{}, fmt.Errorf("errand: heartbeat: %w", err)
	}
	if wi.ID == "" {
		return WorkerInfo{}, fmt.Errorf("errand: heartbeat without a worker ID")
	}
	return wi, nil
}
