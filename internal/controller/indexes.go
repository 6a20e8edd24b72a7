/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

	http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/
package controller

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// FieldIndexer is the part of a manager that registers cache indexes.
type FieldIndexer interface {
	IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error
}

// SetupIndexes registers the cache indexes the controllers and webhooks use.
// Call it once per manager, before the controllers start.
func SetupIndexes(ctx context.Context, idx FieldIndexer) error {
	if err := idx.IndexField(ctx, &v1alpha1.ResearchRun{}, sessionRefIndex, func(o client.Object) []string {
		return []string{o.(*v1alpha1.ResearchRun).Spec.SessionRef.Name}
	}); err != nil {
		return err
	}
	return idx.IndexField(ctx, &v1alpha1.Session{}, policyRefIndex, func(o client.Object) []string {
		return []string{o.(*v1alpha1.Session).Spec.PolicyRef.Name}
	})
}
