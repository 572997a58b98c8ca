// Package cdr encodes and decodes the ROS 2 messages the node exchanges as
// XCDR1 (classic CDR) bytes, the wire format of every ROS 2 RMW and of
// rosbag2's MCAP files, and describes their types: ROS 2 and DDS names,
// REP 2011 type hashes and the ros2msg schema text.
//
// Messages are goroslib's structs (the ROS 1 definitions the rest of the
// program already uses) read as the ROS 2 definition of the same type:
// std_msgs/Header has no seq in ROS 2, so Header.Seq is neither written nor
// read. The few ROS-2-only types (std_srvs/srv/Trigger's request and
// response, rmw_dds_common's discovery messages) are defined here.
//
// Every type is described once, in code (types.go): field names, field types,
// array and sequence kinds, nested types and constants. The codec, the type
// hash and the schema text are all derived from that one description, so
// they cannot disagree.
//
// Wire format (OMG XTypes 1.3, §7.4.3, "XCDR1"): a 4-byte encapsulation
// header (00 01 00 00 for little endian), then the fields in order, each
// primitive aligned to its own size (at most 8) counted from the byte after
// the header; a string is a uint32 length that counts its terminating NUL,
// the bytes, then the NUL; a sequence is a uint32 count and its elements (an
// empty sequence adds no alignment); a fixed array is its elements.
package cdr
