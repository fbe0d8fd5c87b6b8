/* What the verbs NIC needs of rdma-core's mlx5 direct-verbs header: the queue pair's and the
 * completion queues' rings (mlx5dv_init_obj), for bindgen (operator/build.rs, feature `verbs`). */
#include <infiniband/mlx5dv.h>
