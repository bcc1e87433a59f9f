// fabric::list_devices(): the RDMA devices as plain data. Runs without root and without a NIC:
// the emulated devices (verbs-emu) are always there, with the limits of their profiles.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "lattice/fabric/fabric.h"

namespace lattice::fabric {
namespace {

const DeviceInfo* find(const DeviceList& list, const std::string& name) {
  auto it = std::find_if(list.devices.begin(), list.devices.end(), [&](const DeviceInfo& d) { return d.name == name; });
  return it == list.devices.end() ? nullptr : &*it;
}

TEST(Devices, EmulatedDevicesAreListedWithTheirProfiles) {
  DeviceList list = list_devices();
  const DeviceInfo* tb5 = find(list, "emu_tb5_0");
  ASSERT_NE(tb5, nullptr);
  EXPECT_TRUE(tb5->emulated);
  EXPECT_TRUE(tb5->error.empty()) << tb5->error;
  EXPECT_EQ(tb5->max_qp, 10);  // the Apple TB5 limits
  EXPECT_EQ(tb5->max_mr, 100);
  EXPECT_FALSE(tb5->atomics);
  ASSERT_EQ(tb5->ports.size(), 2u);
  EXPECT_EQ(tb5->ports[0].number, 1);
  EXPECT_EQ(tb5->ports[0].state, "DOWN");
  EXPECT_FALSE(tb5->ports[0].active);
  EXPECT_EQ(tb5->ports[1].state, "ACTIVE");
  EXPECT_TRUE(tb5->ports[1].active);
  EXPECT_EQ(tb5->ports[1].mtu_bytes, 4096);
  EXPECT_EQ(tb5->ports[1].max_msg_bytes, 16773120u);
  EXPECT_EQ(tb5->ports[1].link_layer, "ethernet");
  // GID 0 MAC-derived link-local, 1 IPv4-mapped, 2 link-local.
  ASSERT_GE(tb5->ports[1].gids.size(), 3u);
  EXPECT_EQ(tb5->ports[1].gids[0].index, 0);
  EXPECT_FALSE(tb5->ports[1].gids[0].empty);
  EXPECT_EQ(tb5->ports[1].gids[0].address.rfind("fe80::", 0), 0u) << tb5->ports[1].gids[0].address;
  EXPECT_TRUE(tb5->ports[1].gids[1].ipv4_mapped);
  EXPECT_EQ(tb5->ports[1].gids[1].address.rfind("::ffff:", 0), 0u) << tb5->ports[1].gids[1].address;
  EXPECT_FALSE(tb5->ports[1].gids[0].ipv4_mapped);

  const DeviceInfo* rc = find(list, "emu_rc_0");
  ASSERT_NE(rc, nullptr);
  EXPECT_TRUE(rc->emulated);
  EXPECT_TRUE(rc->atomics);
  ASSERT_EQ(rc->ports.size(), 1u);
  EXPECT_TRUE(rc->ports[0].active);
  EXPECT_EQ(rc->ports[0].max_msg_bytes, 16u << 20);
}

TEST(Devices, SystemDevicesComeFirstAndEmulatedOnesOnlyWhenAsked) {
  DeviceList with = list_devices(true);
  DeviceList without = list_devices(false);
  for (const auto& d : without.devices) EXPECT_FALSE(d.emulated) << d.name;
  // The system's part is the same either way; it comes first.
  ASSERT_EQ(with.devices.size(), without.devices.size() + 2);
  for (size_t i = 0; i < without.devices.size(); ++i) EXPECT_EQ(with.devices[i].name, without.devices[i].name);
  // No verbs library is "no RDMA", never a failure of the listing.
  if (without.system.ok()) {
    EXPECT_FALSE(without.system_library.empty());
  } else {
    EXPECT_EQ(without.system.code(), ErrorCode::kUnavailable) << without.system.to_string();
    EXPECT_TRUE(without.devices.empty());
  }
  for (const auto& d : with.devices)
    for (const auto& p : d.ports) EXPECT_LE(p.gids.size(), size_t(kMaxListedGids));
}

}  // namespace
}  // namespace lattice::fabric
