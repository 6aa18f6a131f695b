use super::*;
use std::future::poll_fn;

const STEP_10_MS: Duration = Duration::from_millis(640);

#[tokio::test(start_paused = true)]
async fn a_deadline_wakes_its_connection_once_passed() {
    let drain = Drain::new(STEP_10_MS);
    let mut signal = drain.signal(None);
    let started = Instant::now();
    let mut restart = Some(Duration::from_millis(100));
    poll_fn(|cx| signal.poll_deadline(cx, restart.take())).await;
    let took = started.elapsed();
    // Within a tick (10 ms) of the deadline.
    assert!(
        took >= Duration::from_millis(100) && took <= Duration::from_millis(120),
        "{took:?}"
    );
}

/// A keep-alive connection sets its deadline again for every request: the later
/// deadline counts, found when the sweeper reaches the slot.
#[tokio::test(start_paused = true)]
async fn a_deadline_set_again_replaces_the_linked_one() {
    let drain = Drain::new(STEP_10_MS);
    let mut signal = drain.signal(None);
    let started = Instant::now();
    let wait = Some(Duration::from_millis(100));
    let first = poll_fn(|cx| Poll::Ready(signal.poll_deadline(cx, wait))).await;
    assert!(first.is_pending());
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut restart = wait;
    poll_fn(|cx| signal.poll_deadline(cx, restart.take())).await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(150) && took <= Duration::from_millis(170),
        "{took:?}"
    );
    assert_eq!(drain.shared.lock().linked, 0, "nothing left linked");
}

/// An earlier deadline than the one the sweeper sleeps for wakes it.
#[tokio::test(start_paused = true)]
async fn an_earlier_deadline_is_not_kept_waiting_for_a_later_one() {
    let drain = Drain::new(STEP_10_MS);
    let (mut late, mut early) = (drain.signal(None), drain.signal(None));
    let started = Instant::now();
    let late_wait = Some(Duration::from_secs(60));
    assert!(poll_fn(|cx| Poll::Ready(late.poll_deadline(cx, late_wait)))
        .await
        .is_pending());
    let mut restart = Some(Duration::from_millis(30));
    poll_fn(|cx| early.poll_deadline(cx, restart.take())).await;
    assert!(started.elapsed() <= Duration::from_millis(50));
}

#[tokio::test(start_paused = true)]
async fn shutdown_wakes_every_connection_and_waits_for_them() {
    let drain = Drain::new(Duration::from_secs(30));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..2 {
        let mut signal = drain.signal(None);
        tasks.spawn(async move {
            poll_fn(|cx| {
                if signal.poll_draining(cx) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
        });
    }
    tokio::time::timeout(Duration::from_secs(1), drain.shutdown())
        .await
        .expect("shutdown ends once its connections have");
    assert_eq!(tasks.join_all().await.len(), 2);
}

/// Connections that close before their deadlines leave nothing linked, and their
/// slots are reused.
#[tokio::test(start_paused = true)]
async fn closed_connections_leave_no_deadline_behind() {
    let drain = Drain::new(STEP_10_MS);
    let wait = Some(Duration::from_secs(30));
    let mut open = Vec::new();
    for i in 0..10_000 {
        let mut signal = drain.signal(None);
        assert!(poll_fn(|cx| Poll::Ready(signal.poll_deadline(cx, wait)))
            .await
            .is_pending());
        if i % 1000 == 0 {
            open.push(signal);
        }
    }
    let mut table = drain.shared.lock();
    assert_eq!(table.linked, 10, "only the open connections' deadlines");
    assert_eq!(table.slots.chunks(), 1, "the slots are reused");
    let mut linked = 0;
    for bucket in table.wheel {
        let mut index = bucket;
        while index != NIL {
            linked += 1;
            index = table.slot(index).next;
        }
    }
    assert_eq!(linked, 10, "the wheel's lists hold exactly them");
}

#[tokio::test(start_paused = true)]
async fn the_sweeper_ends_with_the_listener_and_its_last_connection() {
    let drain = Drain::new(STEP_10_MS);
    let shared = drain.shared.clone();
    let mut signal = drain.signal(None);
    let wait = Some(Duration::from_secs(60));
    assert!(poll_fn(|cx| Poll::Ready(signal.poll_deadline(cx, wait)))
        .await
        .is_pending());
    assert!(shared.lock().sweeper);
    drop(drain);
    drop(signal);
    for _ in 0..100 {
        if !shared.lock().sweeper {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("the sweeper is still running");
}
