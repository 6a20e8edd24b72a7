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

package node

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// runBinder is the stack's stand-in for kube-scheduler: it watches pods that
// have no node and binds each one to the local node with a Binding, exactly
// the API call a scheduler makes. It knows one node, so it has nothing to
// choose; it honours only schedulerName (pods that ask for another scheduler
// are left alone). It does not evaluate node selectors, affinity, taints or
// resources.
func (n *Node) runBinder(ctx context.Context) {
	factory := informers.NewSharedInformerFactoryWithOptions(n.cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", "").String()
		}))
	informer := factory.Core().V1().Pods()
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](50*time.Millisecond, 5*time.Second),
		workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "binder"})
	enqueue := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || !n.wantsBinding(pod) {
			return
		}
		queue.Add(cache.MetaObjectToName(pod))
	}
	_, _ = informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	})
	factory.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), informer.Informer().HasSynced) {
		return
	}
	for {
		key, quit := queue.Get()
		if quit {
			factory.Shutdown()
			return
		}
		func() {
			defer queue.Done(key)
			pod, err := informer.Lister().Pods(key.Namespace).Get(key.Name)
			if apierrors.IsNotFound(err) || (err == nil && !n.wantsBinding(pod)) {
				queue.Forget(key)
				return
			}
			if err != nil {
				queue.AddRateLimited(key)
				return
			}
			binding := &corev1.Binding{
				ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
				Target:     corev1.ObjectReference{Kind: "Node", Name: n.cfg.NodeName},
			}
			err = n.cfg.Client.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
			switch {
			case err == nil:
				n.log.V(1).Info("bound pod", "pod", key.String(), "node", n.cfg.NodeName)
				queue.Forget(key)
			case apierrors.IsNotFound(err), apierrors.IsConflict(err):
				queue.Forget(key) // deleted, or bound meanwhile
			default:
				if ctx.Err() == nil {
					n.log.Error(err, "binding pod", "pod", key.String())
					queue.AddRateLimited(key)
				}
			}
		}()
	}
}

func (n *Node) wantsBinding(pod *corev1.Pod) bool {
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
		return false
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	s := pod.Spec.SchedulerName
	return s == "" || s == corev1.DefaultSchedulerName
}
