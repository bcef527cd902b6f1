//! The fenced resource the drill workload writes to: a `MemoryFence` (the fencing rule
//! of `holdfast-fence`), in the drill process. Every write is recorded with its
//! verdict. `--plant unfenced-resource` switches the token check off, to prove the
//! checker catches what the fence prevents.

use holdfast_core::{FencingToken, LockName, ShardKey};
use holdfast_fence::{FencedStore, LockId, MemoryFence};

pub struct Resource {
    pub name: String,
    fence: MemoryFence,
    /// Planted bug: accept every write, whatever its token.
    unfenced: bool,
}

impl Resource {
    pub fn new(name: &str, unfenced: bool) -> Resource {
        Resource { name: name.to_owned(), fence: MemoryFence::new(name), unfenced }
    }

    /// Writes `value` under `lock` with `token`: `true` if accepted.
    pub fn write(&self, shard: &ShardKey, lock: &LockName, token: FencingToken, value: &[u8]) -> bool {
        if self.unfenced {
            return true;
        }
        let id = LockId::new(shard.clone(), lock.clone());
        self.fence.write(&id, token, lock.as_str().as_bytes(), value).is_ok()
    }
}
