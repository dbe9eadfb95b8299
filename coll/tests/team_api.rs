//! A team's set syncs within one process (a job of one rank, started without a launcher):
//! an empty set and a set synced already are `Synced` to the `_some` forms and done for
//! the `_all` forms, and a set with a collective in flight is reported as it completes.

#![forbid(unsafe_code)]

use gaspi::{Context, Timeout, GROUP_ALL};
use gaspi_coll::{
    try_sync_all, try_sync_some, wait_sync_all, wait_sync_some, Collectives, Error, Flags, Handle,
    Team,
};

const TIMEOUT: Timeout = Timeout::Millis(10_000);

#[test]
fn set_syncs_of_empty_and_synced_sets() {
    let ctx = Context::init().expect("a job of one starts without a launcher");
    let coll = Collectives::new(&ctx).expect("the namespace registers");
    let team = Team::new(&coll, GROUP_ALL, TIMEOUT).expect("a team of one");

    let none: &mut [Handle<'_, '_>] = &mut [];
    assert!(matches!(wait_sync_some(none, TIMEOUT), Err(Error::Synced)));
    assert!(matches!(try_sync_some(none), Err(Error::Synced)));
    assert!(matches!(try_sync_all(none), Ok(true)));
    assert!(matches!(wait_sync_all(none, TIMEOUT), Ok(())));

    let src = *b"team of one";
    let mut dst = [0u8; 11];
    {
        let mut handles = vec![team
            .broadcast_nb(&mut dst[..], 0, &src[..], Flags::MY)
            .expect("initiated")];
        let done = wait_sync_some(&mut handles, TIMEOUT).expect("one completes");
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].0, 0);
        assert!(done[0].1.is_ok());
        assert!(matches!(
            wait_sync_some(&mut handles, TIMEOUT),
            Err(Error::Synced)
        ));
        assert!(matches!(try_sync_some(&mut handles), Err(Error::Synced)));
        assert!(matches!(try_sync_all(&mut handles), Ok(true)));
    }
    assert_eq!(dst, src);
}
