# Sourced by the installers: apt_get runs apt-get (as root, or through sudo)
# and, when another apt or dpkg holds the lock (a fresh machine's automatic
# updates, say), says so and waits for it instead of failing.
#   apt_get update | apt_get install -y PKG... | apt_get download PKG...
apt_get() {
  local sudo="" log rc tries=0
  [ "$(id -u)" = 0 ] || sudo="sudo"
  log=$(mktemp)
  while :; do
    # DPkg::Lock::Timeout makes install wait for the dpkg lock itself; the
    # loop covers the lists lock of update and any other "could not get lock".
    set +e
    DEBIAN_FRONTEND=noninteractive $sudo apt-get -q -o DPkg::Lock::Timeout=120 "$@" 2>&1 | tee "$log" >&2
    rc=${PIPESTATUS[0]}
    set -e
    if [ "$rc" = 0 ]; then rm -f "$log"; return 0; fi
    if ! grep -qiE 'could not get lock|unable to lock|is held by process|unable to acquire the dpkg' "$log"; then
      rm -f "$log"; return "$rc"
    fi
    tries=$((tries + 1))
    if [ "$tries" -gt 60 ]; then
      echo "apt is still locked after 10 minutes: another apt or dpkg is running (ps aux | grep -E 'apt|dpkg'); let it finish, then run this again" >&2
      rm -f "$log"; return 1
    fi
    [ "$tries" = 1 ] && echo "another apt or dpkg holds the lock (often the machine's automatic updates); waiting for it, up to 10 minutes" >&2
    sleep 10
  done
}
